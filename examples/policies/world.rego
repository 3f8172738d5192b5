package main
import rego.v1
deny contains {"msg": "opens it to the whole internet (0.0.0.0/0)", "resource": rc.address} if {
    some rc in input.resource_changes
    contains(object.get(rc.change.after, "content", ""), "0.0.0.0/0")
}
warn contains sprintf("%s is new: give it an owner", [rc.address]) if {
    some rc in input.resource_changes
    "create" in rc.change.actions
}
