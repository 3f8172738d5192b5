//! The stale-lock check (docs/rules.md): is the Terraform state lock a leftover of this
//! object's own dead runner, a live runner's, or a foreign holder's?

use serde::{Deserialize, Serialize};

use captf_shared::names::RunnerPattern;

/// Terraform's lock info (`app.terraform.io/lock-info` on the lock Lease).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LockInfo {
    #[serde(rename = "ID", default)]
    pub id: String,
    #[serde(default)]
    pub operation: String,
    #[serde(default)]
    pub info: String,
    #[serde(default)]
    pub who: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub created: String,
    #[serde(default)]
    pub path: String,
}

impl LockInfo {
    /// The hostname: the part of `Who` after the last `@` (the user may be empty: `@host`).
    pub fn hostname(&self) -> &str {
        self.who.rsplit_once('@').map_or(self.who.as_str(), |(_, host)| host)
    }
}

/// The lock Lease as the check needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockLease {
    pub holder_identity: Option<String>,
    /// The raw `app.terraform.io/lock-info` annotation.
    pub lock_info: Option<String>,
}

/// The holder pod as read live from the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HolderPod {
    /// NotFound.
    Gone,
    /// It exists: its phase and whether it is terminating (deletionTimestamp set).
    Present { phase: Option<String>, terminating: bool },
    /// Not read (explain without `--pods`): never stale.
    Unknown,
}

/// What the check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    /// No lock Lease, or no holder.
    Free,
    /// Held by this object's own runner pod, which is alive (or could not be read).
    OwnAlive { holder: String, why: String },
    /// Held by this object's own runner pod, which is gone or finished: hand `id` to the next Job.
    Stale { id: String, holder: String, why: String },
    /// Held by something that is not this object's runner: reported, never unlocked. `id` is
    /// the lock ID its holder releases it with (`tofu force-unlock <id>`).
    Foreign {
        holder: String,
        id: String,
        operation: String,
        created: String,
    },
    /// Held, but the lock info is missing or does not parse: never stale.
    Unparsable { holder: String, why: String },
}

impl LockState {
    /// The lock ID to hand to the next Job (`force_unlock_id`): only for a stale lock.
    pub fn force_unlock_id(&self) -> Option<&str> {
        match self {
            LockState::Stale { id, .. } => Some(id),
            _ => None,
        }
    }

    pub fn holder(&self) -> Option<&str> {
        match self {
            LockState::Free => None,
            LockState::OwnAlive { holder, .. }
            | LockState::Stale { holder, .. }
            | LockState::Foreign { holder, .. }
            | LockState::Unparsable { holder, .. } => Some(holder),
        }
    }

    /// One line: why it is (not) stale.
    pub fn why(&self) -> String {
        match self {
            LockState::Free => "the state lock is not held".to_string(),
            LockState::OwnAlive { why, .. } | LockState::Stale { why, .. } | LockState::Unparsable { why, .. } => {
                why.clone()
            }
            LockState::Foreign {
                holder,
                id,
                operation,
                created,
            } => format!(
                "held by {holder} (lock ID {id}, operation {operation}, since {created}), which is not one of this object's runner pods: never unlocked"
            ),
        }
    }

    /// The foreign holder, operation and time for `StateReadable=False/StateLocked`.
    pub fn state_locked_message(&self) -> Option<String> {
        match self {
            LockState::Foreign {
                holder,
                id,
                operation,
                created,
            } => Some(format!(
                "state locked by {holder} (lock ID {id}, operation {operation}, since {created})"
            )),
            _ => None,
        }
    }
}

/// The hostname of the holder if the lock is held and its info parses: the pod to read live.
pub fn holder_hostname(lease: Option<&LockLease>) -> Option<String> {
    let lease = lease?;
    lease.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let info: LockInfo = serde_json::from_str(lease.lock_info.as_deref()?).ok()?;
    Some(info.hostname().to_string())
}

/// The three conditions of docs/rules.md, "Stale-lock recovery": held and parsable; the holder is this object's own runner
/// pod; that pod is gone or in a terminal phase (a terminating pod is alive).
pub fn check_lock(lease: Option<&LockLease>, own: &RunnerPattern, pod: &HolderPod) -> LockState {
    let Some(lease) = lease else {
        return LockState::Free;
    };
    let Some(holder_identity) = lease.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
        return LockState::Free;
    };
    let Some(raw) = lease.lock_info.as_deref() else {
        return LockState::Unparsable {
            holder: holder_identity.to_string(),
            why: "the lock Lease has a holder but no app.terraform.io/lock-info: never stale".to_string(),
        };
    };
    let info: LockInfo = match serde_json::from_str(raw) {
        Ok(info) => info,
        Err(e) => {
            return LockState::Unparsable {
                holder: holder_identity.to_string(),
                why: format!("the lock info does not parse ({e}): never stale"),
            };
        }
    };
    let host = info.hostname();
    if !own.matches(host) {
        let holder = if info.who.is_empty() {
            holder_identity.to_string()
        } else {
            info.who.clone()
        };
        return LockState::Foreign {
            holder,
            id: if info.id.is_empty() {
                holder_identity.to_string()
            } else {
                info.id.clone()
            },
            operation: info.operation.clone(),
            created: info.created.clone(),
        };
    }
    let holder = host.to_string();
    let id = if info.id.is_empty() {
        holder_identity.to_string()
    } else {
        info.id.clone()
    };
    match pod {
        HolderPod::Gone => LockState::Stale {
            id,
            why: format!("held by this object's runner pod {holder}, which no longer exists"),
            holder,
        },
        HolderPod::Present { phase, terminating } => match phase.as_deref() {
            Some(p @ ("Succeeded" | "Failed")) => LockState::Stale {
                id,
                why: format!("held by this object's runner pod {holder}, which has {p}"),
                holder,
            },
            p => LockState::OwnAlive {
                why: if *terminating {
                    format!("held by this object's runner pod {holder}, which is terminating and may still be running")
                } else {
                    format!(
                        "held by this object's runner pod {holder}, which is alive (phase {})",
                        p.unwrap_or("unknown")
                    )
                },
                holder,
            },
        },
        HolderPod::Unknown => LockState::OwnAlive {
            why: format!("held by this object's runner pod {holder}, whose pod was not given: not judged stale"),
            holder,
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::names;
    use captf_shared::{Kind, Op};
    use proptest::prelude::*;

    fn own() -> RunnerPattern {
        RunnerPattern::new(Kind::TerraformCluster, "default", "prod-eu")
    }

    fn own_pod() -> String {
        format!(
            "{}-x2k9q",
            names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 7)
        )
    }

    fn lease(who: &str, id: &str) -> LockLease {
        let info = serde_json::json!({"ID": id, "Operation": "OperationTypeApply", "Info": "", "Who": who,
            "Version": "1.9.5", "Created": "2024-06-01T10:20:30.123456789Z", "Path": ""});
        LockLease {
            holder_identity: Some("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55".into()),
            lock_info: Some(info.to_string()),
        }
    }

    fn present(phase: &str, terminating: bool) -> HolderPod {
        HolderPod::Present {
            phase: Some(phase.into()),
            terminating,
        }
    }

    #[test]
    fn own_runner_pod_gone_or_finished_is_stale_with_the_lock_info_id() {
        let l = lease(&format!("root@{}", own_pod()), "lock-id-1");
        for pod in [HolderPod::Gone, present("Succeeded", false), present("Failed", true)] {
            let s = check_lock(Some(&l), &own(), &pod);
            assert_eq!(s.force_unlock_id(), Some("lock-id-1"), "{pod:?}");
        }
    }

    #[test]
    fn the_id_falls_back_to_the_lease_holder_identity() {
        let l = lease(&format!("root@{}", own_pod()), "");
        let s = check_lock(Some(&l), &own(), &HolderPod::Gone);
        assert_eq!(s.force_unlock_id(), Some("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55"));
    }

    #[test]
    fn a_terminating_runner_pod_keeps_its_lock() {
        let l = lease(&format!("root@{}", own_pod()), "lock-id-1");
        let s = check_lock(Some(&l), &own(), &present("Running", true));
        assert!(matches!(s, LockState::OwnAlive { .. }), "{s:?}");
        assert_eq!(s.force_unlock_id(), None);
        assert!(
            check_lock(Some(&l), &own(), &present("Running", false))
                .force_unlock_id()
                .is_none()
        );
        assert!(
            check_lock(Some(&l), &own(), &HolderPod::Unknown)
                .force_unlock_id()
                .is_none()
        );
    }

    #[test]
    fn a_workstations_lock_is_never_stale() {
        let l = lease("alice@alice-laptop", "lock-id-2");
        let s = check_lock(Some(&l), &own(), &HolderPod::Gone);
        assert_eq!(
            s,
            LockState::Foreign {
                holder: "alice@alice-laptop".into(),
                id: "lock-id-2".into(),
                operation: "OperationTypeApply".into(),
                created: "2024-06-01T10:20:30.123456789Z".into()
            }
        );
        assert_eq!(s.force_unlock_id(), None);
        let m = s.state_locked_message().unwrap();
        assert!(
            m.contains("alice@alice-laptop") && m.contains("lock ID lock-id-2"),
            "{m}"
        );
    }

    #[test]
    fn who_with_an_empty_user_is_still_recognised() {
        let l = lease(&format!("@{}", own_pod()), "lock-id-3");
        assert_eq!(
            check_lock(Some(&l), &own(), &HolderPod::Gone).force_unlock_id(),
            Some("lock-id-3")
        );
        // An `@` inside the user part: the hostname is after the last `@`.
        let l = lease(&format!("a@b@{}", own_pod()), "lock-id-4");
        assert_eq!(
            check_lock(Some(&l), &own(), &HolderPod::Gone).force_unlock_id(),
            Some("lock-id-4")
        );
    }

    #[test]
    fn a_hostname_of_another_object_whose_name_is_a_prefix_of_this_ones_is_foreign() {
        let other = format!(
            "{}-x2k9q",
            names::job_name(Kind::TerraformCluster, "default", "prod", Op::Apply, 7)
        );
        let l = lease(&format!("root@{other}"), "lock-id-5");
        let s = check_lock(Some(&l), &own(), &HolderPod::Gone);
        assert!(matches!(s, LockState::Foreign { .. }), "{s:?}");
        // And the other way round.
        let l = lease(&format!("root@{}", own_pod()), "lock-id-6");
        let shorter = RunnerPattern::new(Kind::TerraformCluster, "default", "prod");
        assert!(matches!(
            check_lock(Some(&l), &shorter, &HolderPod::Gone),
            LockState::Foreign { .. }
        ));
    }

    #[test]
    fn an_unparsable_lock_info_is_never_stale() {
        let mut l = lease(&format!("root@{}", own_pod()), "x");
        l.lock_info = Some("{not json".into());
        let s = check_lock(Some(&l), &own(), &HolderPod::Gone);
        assert!(matches!(s, LockState::Unparsable { .. }));
        assert_eq!(s.force_unlock_id(), None);
        l.lock_info = None;
        assert!(matches!(
            check_lock(Some(&l), &own(), &HolderPod::Gone),
            LockState::Unparsable { .. }
        ));
    }

    #[test]
    fn no_holder_means_free() {
        assert_eq!(check_lock(None, &own(), &HolderPod::Gone), LockState::Free);
        let mut l = lease("root@x", "id");
        l.holder_identity = None;
        assert_eq!(check_lock(Some(&l), &own(), &HolderPod::Gone), LockState::Free);
        l.holder_identity = Some(String::new());
        assert_eq!(check_lock(Some(&l), &own(), &HolderPod::Gone), LockState::Free);
    }

    proptest! {
        #[test]
        fn a_foreign_lock_never_yields_a_force_unlock_id(
            user in "[a-z@]{0,8}", host in "[a-z0-9-]{0,63}", id in "[a-z0-9-]{0,36}",
            phase in prop::sample::select(vec!["Succeeded", "Failed", "Running", "Pending"]),
            gone in any::<bool>(), terminating in any::<bool>(),
        ) {
            let pattern = own();
            prop_assume!(!pattern.matches(&host));
            let l = lease(&format!("{user}@{host}"), &id);
            let pod = if gone { HolderPod::Gone } else { HolderPod::Present { phase: Some(phase.to_string()), terminating } };
            let s = check_lock(Some(&l), &pattern, &pod);
            prop_assert_eq!(s.force_unlock_id(), None);
            let is_foreign = matches!(s, LockState::Foreign { .. });
            prop_assert!(is_foreign);
        }

        #[test]
        fn an_unparsable_lock_info_never_yields_an_id(junk in ".{0,80}") {
            prop_assume!(serde_json::from_str::<LockInfo>(&junk).is_err());
            let l = LockLease { holder_identity: Some("h".into()), lock_info: Some(junk) };
            let s = check_lock(Some(&l), &own(), &HolderPod::Gone);
            prop_assert_eq!(s.force_unlock_id(), None);
        }
    }
}
