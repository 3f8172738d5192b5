//! What CAPTF makes for an object is bound to that object's UID (docs/trust.md).
//!
//! Names alone cannot say whose an object is: anyone who may create a ServiceAccount or a
//! Secret may create one under another object's names first, and a hashed suffix is only 32 bits.
//! So every object CAPTF makes or adopts for one of its objects carries that object's UID:
//!
//! - by a controller owner reference ([`Binding::Owner`]): the runner ServiceAccount, Role and
//!   RoleBinding, the inputs and outputs Secrets, the run lease and the Jobs (whose pods are
//!   the Job's, by the Job's own owner reference);
//! - by the annotation [`keys::ANNOTATION_OWNER_UID`] ([`Binding::Annotation`]) where an owner
//!   must not be set: the state Secret and the lock Lease, which must survive the object.
//!
//! An object under the object's names that is bound to another UID (or, for an owned kind, not
//! bound to this one) is never adopted, written to or handed to a runner: the object is held
//! with `Ready=False/NameConflict` naming it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::keys;

/// How an object is bound to the object it was made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// A controller owner reference with the object's UID.
    Owner,
    /// The annotation `captf.io/owner-uid` with the object's UID (no owner: it outlives it).
    Annotation,
}

/// What the object's own history says about annotation-bound objects made before.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// The object's inputs Secret exists and is owned by it: CAPTF ran for this object before,
    /// so an unannotated state Secret or lock Lease under its names is one an older CAPTF (or
    /// the backend) made for it.
    pub own_inputs: bool,
    /// The UID the object's own inputs Secret records (`captf.io/owner-uid`): after a
    /// `clusterctl move` the object has a new UID while its Secrets still name the old one.
    pub recorded_uid: Option<String>,
}

impl History {
    /// The history an inputs Secret gives (its metadata, `None`: absent) for the object `uid`.
    pub fn of_inputs(inputs: Option<&ObjectMeta>, uid: &str) -> History {
        match inputs {
            Some(m) if owned_by(m, uid) => History {
                own_inputs: true,
                recorded_uid: annotation(m).map(str::to_string),
            },
            _ => History::default(),
        }
    }
}

/// What to do with an object found under the object's names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing there: create it, bound.
    Absent,
    /// Bound to the object: use it.
    Ours,
    /// Made for this object but not (or no longer) annotated with its UID: stamp the UID, then
    /// use it.
    Stamp,
    /// Someone else's: never adopted; the message says whose.
    Foreign(String),
    /// Released by the finalized object of this UID (`captf.io/released-by`) and bound to
    /// nobody: whether this object may take it over is `captf_core::adoption`'s to say.
    Released(String),
}

/// The controller owner reference's UID, if any.
fn controller_uid(m: &ObjectMeta) -> Option<&str> {
    m.owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Is `m` controlled (controller owner reference) by the object `uid`?
pub fn owned_by(m: &ObjectMeta, uid: &str) -> bool {
    !uid.is_empty() && controller_uid(m) == Some(uid)
}

fn annotation_value<'a>(m: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    m.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The `captf.io/owner-uid` annotation.
pub fn annotation(m: &ObjectMeta) -> Option<&str> {
    annotation_value(m, keys::ANNOTATION_OWNER_UID)
}

/// The UID of the object that released `m` when its finalizer went, if one did.
pub fn released_by(m: &ObjectMeta) -> Option<&str> {
    annotation_value(m, keys::ANNOTATION_RELEASED_BY)
}

/// The verdict on `found` (its metadata; `None`: absent) under the object `uid`'s names (PURE).
pub fn verdict(found: Option<&ObjectMeta>, binding: Binding, uid: &str, history: &History) -> Verdict {
    let Some(m) = found else {
        return Verdict::Absent;
    };
    match binding {
        Binding::Owner => match controller_uid(m) {
            Some(u) if !uid.is_empty() && u == uid => Verdict::Ours,
            Some(u) => Verdict::Foreign(format!("is controlled by another object (uid {u})")),
            None => Verdict::Foreign("is not owned by this object".to_string()),
        },
        Binding::Annotation => match annotation(m) {
            Some(u) if !uid.is_empty() && u == uid => Verdict::Ours,
            // Moved: the object's own inputs Secret records the UID it had.
            Some(u) if history.own_inputs && history.recorded_uid.as_deref() == Some(u) => Verdict::Stamp,
            Some(u) => Verdict::Foreign(format!(
                "is bound to another object ({} {u})",
                keys::ANNOTATION_OWNER_UID
            )),
            // Released by the object itself (a late pass of an object on its way out): it is
            // its successor's now, never taken back.
            None if released_by(m) == Some(uid) => Verdict::Foreign(format!(
                "was released by this object ({} {uid}) for a successor of its name",
                keys::ANNOTATION_RELEASED_BY
            )),
            None => match released_by(m) {
                // Released by a finalized object of the same name: never by the name alone.
                Some(by) => Verdict::Released(by.to_string()),
                None if history.own_inputs => Verdict::Stamp,
                None => Verdict::Foreign(format!(
                    "existed before this object's first Job and has no {} annotation",
                    keys::ANNOTATION_OWNER_UID
                )),
            },
        },
    }
}

/// The `Ready=False/NameConflict` message for `what` (e.g. `Secret team-a/tfstate-default-x-tc`).
pub fn conflict_message(what: &str, why: &str) -> String {
    format!("{what} {why}: it is not adopted and no Job starts until it is removed or bound to this object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn owned(uid: &str, controller: bool) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                uid: uid.into(),
                controller: Some(controller),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        }
    }

    fn annotated(uid: &str) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(BTreeMap::from([(
                keys::ANNOTATION_OWNER_UID.to_string(),
                uid.to_string(),
            )])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn an_owned_kind_is_ours_only_under_our_controller_reference() {
        let h = History::default();
        assert_eq!(
            verdict(Some(&owned("u1", true)), Binding::Owner, "u1", &h),
            Verdict::Ours
        );
        assert!(
            matches!(verdict(Some(&owned("u2", true)), Binding::Owner, "u1", &h), Verdict::Foreign(m) if m.contains("u2"))
        );
        assert!(matches!(
            verdict(Some(&owned("u1", false)), Binding::Owner, "u1", &h),
            Verdict::Foreign(_)
        ));
        assert!(matches!(
            verdict(Some(&ObjectMeta::default()), Binding::Owner, "u1", &h),
            Verdict::Foreign(_)
        ));
        assert_eq!(verdict(None, Binding::Owner, "u1", &h), Verdict::Absent);
    }

    #[test]
    fn a_state_object_released_by_a_finalized_object_is_released_not_stamped() {
        let fresh = History::default();
        let released = ObjectMeta {
            annotations: Some(BTreeMap::from([(
                keys::ANNOTATION_RELEASED_BY.to_string(),
                "u0".to_string(),
            )])),
            ..ObjectMeta::default()
        };
        assert_eq!(
            verdict(Some(&released), Binding::Annotation, "u1", &fresh),
            Verdict::Released("u0".into())
        );
        // Whatever the object's own history: a released state is never stamped by name alone.
        let ran = History {
            own_inputs: true,
            recorded_uid: None,
        };
        assert_eq!(
            verdict(Some(&released), Binding::Annotation, "u1", &ran),
            Verdict::Released("u0".into())
        );
        // A late pass of the object that released it never takes it back.
        assert!(matches!(
            verdict(Some(&released), Binding::Annotation, "u0", &fresh),
            Verdict::Foreign(_)
        ));
        // Still bound (the release is the removal of the binding): foreign.
        let mut bound = annotated("u0");
        bound
            .annotations
            .as_mut()
            .unwrap()
            .extend(released.annotations.clone().unwrap());
        assert!(matches!(
            verdict(Some(&bound), Binding::Annotation, "u1", &fresh),
            Verdict::Foreign(_)
        ));
        // Owned kinds are never released.
        assert!(matches!(
            verdict(Some(&released), Binding::Owner, "u1", &fresh),
            Verdict::Foreign(_)
        ));
    }

    #[test]
    fn a_state_object_planted_before_the_first_job_is_foreign_and_one_of_our_history_is_stamped() {
        let fresh = History::default();
        let ran = History {
            own_inputs: true,
            recorded_uid: None,
        };
        let bare = ObjectMeta::default();
        assert!(matches!(
            verdict(Some(&bare), Binding::Annotation, "u1", &fresh),
            Verdict::Foreign(_)
        ));
        assert_eq!(verdict(Some(&bare), Binding::Annotation, "u1", &ran), Verdict::Stamp);
        assert_eq!(
            verdict(Some(&annotated("u1")), Binding::Annotation, "u1", &fresh),
            Verdict::Ours
        );
        // Bound to another object: foreign whatever our history.
        assert!(
            matches!(verdict(Some(&annotated("u2")), Binding::Annotation, "u1", &ran), Verdict::Foreign(m) if m.contains("u2"))
        );
    }

    #[test]
    fn a_moved_objects_state_is_restamped_only_when_its_own_inputs_secret_records_the_old_uid() {
        let inputs = ObjectMeta {
            annotations: annotated("old").annotations,
            ..owned("new", true)
        };
        let h = History::of_inputs(Some(&inputs), "new");
        assert_eq!(
            verdict(Some(&annotated("old")), Binding::Annotation, "new", &h),
            Verdict::Stamp
        );
        assert!(matches!(
            verdict(Some(&annotated("other")), Binding::Annotation, "new", &h),
            Verdict::Foreign(_)
        ));
        // An inputs Secret that is not ours is no history at all.
        let theirs = History::of_inputs(Some(&inputs), "thief");
        assert_eq!(theirs, History::default());
        assert!(matches!(
            verdict(Some(&annotated("old")), Binding::Annotation, "thief", &theirs),
            Verdict::Foreign(_)
        ));
    }

    proptest! {
        /// Whatever the history, an object bound to another UID is never adopted, and an
        /// empty UID (an object not yet stored) owns nothing.
        #[test]
        fn an_object_bound_to_another_uid_is_never_adopted(
            ours in "[a-f0-9-]{0,12}", theirs in "[a-f0-9-]{1,12}",
            own_inputs in any::<bool>(), recorded_is_ours in any::<bool>(),
        ) {
            prop_assume!(ours != theirs);
            let h = History { own_inputs, recorded_uid: recorded_is_ours.then(|| ours.clone()) };
            for (m, b) in [(owned(&theirs, true), Binding::Owner), (annotated(&theirs), Binding::Annotation)] {
                let v = verdict(Some(&m), b, &ours, &h);
                prop_assert!(matches!(v, Verdict::Foreign(_)), "{:?}", v);
            }
        }
    }
}
