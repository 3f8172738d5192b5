# A machine module as CAPTF runs it for a TerraformMachine: the VM boots from Cluster API's
# bootstrap data as its user data and gives back the provider ID its Node registers with.
# `captftest_machine` is the test provider's VM; with a cloud's provider it is, for example, an
# `aws_instance` with `user_data_base64 = base64encode(var.bootstrap_data)`.
terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

# Set by CAPTF from the Machine's bootstrap data Secret: its name, `value` and `format`.
variable "bootstrap_data_secret" {
  type = string
}

variable "bootstrap_data" {
  type      = string
  sensitive = true
}

variable "bootstrap_format" {
  type = string

  validation {
    condition     = var.bootstrap_format == "cloud-config"
    error_message = "This machine boots from cloud-config only."
  }
}

# Exported by the TerraformCluster (`spec.exports: [network_id]`).
variable "cluster_network_id" {
  type = string
}

# Cluster API names the bootstrap data Secret after the Machine: one VM per Machine.
resource "captftest_machine" "vm" {
  name      = var.bootstrap_data_secret
  user_data = var.bootstrap_data
}

# The VM's network interface, on the cluster's network.
resource "captftest_thing" "nic" {
  name    = "${var.bootstrap_data_secret}-nic"
  content = var.cluster_network_id
}

output "provider_id" {
  value = captftest_machine.vm.provider_id
}

output "addresses" {
  value = [{ type = "Hostname", address = var.bootstrap_data_secret }]
}
