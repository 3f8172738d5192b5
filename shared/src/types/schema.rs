//! Hand-written schema fragments where a derived one would not be structural.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object whose values are any JSON (Terraform variables and outputs).
pub fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
