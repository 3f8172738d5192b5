//! The kinds CAPTF reconciles and the Terraform operations a Job runs.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A kind that runs Terraform Jobs. (`TerraformMachineTemplate` runs none.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    TerraformCluster,
    TerraformMachinePool,
    TerraformMachine,
}

impl Kind {
    pub const ALL: [Kind; 3] = [
        Kind::TerraformCluster,
        Kind::TerraformMachinePool,
        Kind::TerraformMachine,
    ];

    /// The full kind, as in `apiVersion`/`kind` and in hashes (`TerraformCluster/ns/name`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "TerraformCluster",
            Kind::TerraformMachinePool => "TerraformMachinePool",
            Kind::TerraformMachine => "TerraformMachine",
        }
    }

    /// The short code used in suffixes and Job names: `tc`, `tmp`, `tm`.
    pub fn short(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "tc",
            Kind::TerraformMachinePool => "tmp",
            Kind::TerraformMachine => "tm",
        }
    }

    /// The lowercase plural of the resource (`terraformclusters`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "terraformclusters",
            Kind::TerraformMachinePool => "terraformmachinepools",
            Kind::TerraformMachine => "terraformmachines",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown {what} {got:?}")]
pub struct UnknownName {
    pub what: &'static str,
    pub got: String,
}

impl FromStr for Kind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "kind",
                got: s.to_string(),
            })
    }
}

/// A Terraform operation, one per Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Apply,
    Refresh,
    Drift,
    Destroy,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Apply, Op::Refresh, Op::Drift, Op::Destroy];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Apply => "apply",
            Op::Refresh => "refresh",
            Op::Drift => "drift",
            Op::Destroy => "destroy",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Op {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Op::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "op",
                got: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_ops_round_trip_through_their_names() {
        for k in Kind::ALL {
            assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
        }
        for o in Op::ALL {
            assert_eq!(o.as_str().parse::<Op>(), Ok(o));
        }
        assert!("Apply".parse::<Op>().is_err());
        assert!("TerraformMachineTemplate".parse::<Kind>().is_err());
    }
}
