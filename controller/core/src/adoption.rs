//! Whose state an object may use (docs/trust.md "Names bound to their objects", docs/rules.md
//! "Deletion"): what is under the object's names is judged before every Job, and only what is
//! bound to the object's UID, or released state the object deliberately adopts, is used.
//!
//! An object that goes through its finalizer releases its state Secret and lock Lease
//! (`captf.io/released-by: <its uid>`). After a destroy the controller empties the state Secret
//! as it releases it: nothing is left to take, and the next object of the name takes both over
//! as if they were new. After an orphaning the state describes the infrastructure that was
//! kept; a name says nothing about who is entitled to it (a co-tenant may create the name
//! first, or release crafted state under a name someone else will create later), so it is used
//! only by an object carrying `captf.io/adopt-state: <the releasing uid>`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use captf_shared::binding::{self, Binding, History, Verdict};
use captf_shared::keys;

use captf_shared::types::DeletionPolicy;

use crate::reason::Reason;
use crate::snapshot::Snapshot;

/// One object found (or not) under the object's names, as [`judge`] takes it.
#[derive(Clone, Debug)]
pub struct Found<'a> {
    /// Its kind and name, for the messages (`Secret`, `tfstate-default-x-tc`).
    pub kind: &'a str,
    pub name: &'a str,
    /// Its metadata; `None`: absent.
    pub meta: Option<&'a ObjectMeta>,
    pub binding: Binding,
    /// It holds nothing: a state Secret without data, a lock Lease without a holder.
    pub empty: bool,
    /// The state Secret (what `captf.io/adopt-state` is about).
    pub state: bool,
}

/// Why something under the object's names holds the object: no Job starts, a destroy included,
/// and nothing under its names is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameHold {
    /// Bound to another object (`Ready=False/NameConflict`).
    Conflict(String),
    /// Released state that still holds something and that the object does not adopt, or an
    /// adoption that finds no such state (`Ready=False/ReleasedStateNotAdopted`).
    NotAdopted(String),
}

impl NameHold {
    pub fn reason(&self) -> Reason {
        match self {
            NameHold::Conflict(_) => Reason::NameConflict,
            NameHold::NotAdopted(_) => Reason::ReleasedStateNotAdopted,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            NameHold::Conflict(m) | NameHold::NotAdopted(m) => m,
        }
    }

    /// Put the hold on the snapshot `decide` and the status read.
    pub fn set_on(&self, s: &mut Snapshot) {
        match self {
            NameHold::Conflict(m) => s.name_conflict = Some(m.clone()),
            NameHold::NotAdopted(m) => s.unadopted_state = Some(m.clone()),
        }
    }
}

/// Whether the release of a finalized object's state empties it (PURE): after its destroy
/// succeeded the state describes nothing; with `deletionPolicy: Orphan` it describes what was
/// kept, for an object that adopts it.
pub fn release_empties(s: &Snapshot) -> bool {
    s.spec.deletion_policy != DeletionPolicy::Orphan
}

/// The UID the object's `captf.io/adopt-state` annotation names, if it names one.
pub fn adopts(object: &ObjectMeta) -> Option<&str> {
    object
        .annotations
        .as_ref()?
        .get(keys::ANNOTATION_ADOPT_STATE)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

/// Judge everything found under the object `uid`'s names (PURE). `Ok`: the verdicts in the
/// order given, a released object the object takes over turned into [`Verdict::Stamp`]. `Err`:
/// the first object bound to another object, or else the first released one it may not take.
///
/// A released object is taken over when the object adopts exactly the UID that released it, or
/// when it holds nothing and the object adopts nothing. An adoption that meets no released
/// state Secret at all holds the object too: starting afresh would make a second copy of the
/// infrastructure the person meant to adopt.
pub fn judge(
    ns: &str,
    found: &[Found<'_>],
    uid: &str,
    history: &History,
    adopt: Option<&str>,
) -> Result<Vec<Verdict>, NameHold> {
    let verdicts: Vec<Verdict> = found
        .iter()
        .map(|f| binding::verdict(f.meta, f.binding, uid, history))
        .collect();
    let what = |f: &Found<'_>| format!("{} {ns}/{}", f.kind, f.name);
    if let Some((f, why)) = found.iter().zip(&verdicts).find_map(|(f, v)| match v {
        Verdict::Foreign(why) => Some((f, why)),
        _ => None,
    }) {
        return Err(NameHold::Conflict(binding::conflict_message(&what(f), why)));
    }
    let mut out = Vec::with_capacity(verdicts.len());
    for (f, v) in found.iter().zip(verdicts) {
        match v {
            Verdict::Released(by) => match adopt {
                Some(a) if a == by => out.push(Verdict::Stamp),
                None if f.empty => out.push(Verdict::Stamp),
                _ => return Err(NameHold::NotAdopted(not_adopted_message(&what(f), &by, adopt))),
            },
            Verdict::Absent if f.state => match adopt {
                Some(a) => {
                    return Err(NameHold::NotAdopted(format!(
                        "{} {a} asks to adopt the state released by the object of uid {a}, but {} does not exist: \
                         no Job starts, so that no second copy of its infrastructure is made; remove the \
                         annotation to start without state",
                        keys::ANNOTATION_ADOPT_STATE,
                        what(f)
                    )));
                }
                None => out.push(Verdict::Absent),
            },
            v => out.push(v),
        }
    }
    Ok(out)
}

/// The `Ready=False/ReleasedStateNotAdopted` message for `what`, released by `by`.
fn not_adopted_message(what: &str, by: &str, adopt: Option<&str>) -> String {
    let asked = match adopt {
        Some(a) if a != by => format!(" ({} names {a}, not {by})", keys::ANNOTATION_ADOPT_STATE),
        _ => String::new(),
    };
    format!(
        "{what} was released by a deleted object of this name (uid {by}, {released} {by}) and still holds \
         what it kept; it is never used by name alone{asked}. To take it over with its infrastructure, annotate \
         this object {adopt_key}={by}; to start without it, remove it. No Job starts until then",
        released = keys::ANNOTATION_RELEASED_BY,
        adopt_key = keys::ANNOTATION_ADOPT_STATE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const NS: &str = "team-a";

    fn meta(annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        }
    }

    fn released(by: &str) -> ObjectMeta {
        meta(&[(keys::ANNOTATION_RELEASED_BY, by)])
    }

    /// The state Secret and lock Lease as found, the Secret holding state unless `empty`.
    fn state<'a>(secret: Option<&'a ObjectMeta>, lease: Option<&'a ObjectMeta>, empty: bool) -> Vec<Found<'a>> {
        vec![
            Found {
                kind: "Secret",
                name: "tfstate-default-prod-tc",
                meta: secret,
                binding: Binding::Annotation,
                empty,
                state: true,
            },
            Found {
                kind: "Lease",
                name: "lock-tfstate-default-prod-tc",
                meta: lease,
                binding: Binding::Annotation,
                empty: true,
                state: false,
            },
        ]
    }

    fn fresh() -> History {
        History::default()
    }

    #[test]
    fn released_state_is_not_adopted_by_name_alone() {
        // An Orphan deletion released the state of uid-old; whoever creates the name next
        // (a co-tenant racing the GitOps re-create) gets a hold, not the state.
        let (s, l) = (released("uid-old"), released("uid-old"));
        let held = judge(NS, &state(Some(&s), Some(&l), false), "uid-next", &fresh(), None);
        let Err(NameHold::NotAdopted(m)) = held else {
            panic!("not held: {held:?}")
        };
        assert!(m.contains("Secret team-a/tfstate-default-prod-tc"), "{m}");
        assert!(m.contains("captf.io/adopt-state=uid-old"), "says how to adopt: {m}");
        assert_eq!(NameHold::NotAdopted(m).reason(), Reason::ReleasedStateNotAdopted);
        // Its own inputs Secret (a history of Jobs) does not make it the state's either.
        let ran = History {
            own_inputs: true,
            recorded_uid: None,
        };
        assert!(matches!(
            judge(NS, &state(Some(&s), Some(&l), false), "uid-next", &ran, None),
            Err(NameHold::NotAdopted(_))
        ));
    }

    #[test]
    fn released_state_is_adopted_with_the_annotation_naming_its_uid() {
        let (s, l) = (released("uid-old"), released("uid-old"));
        assert_eq!(
            judge(
                NS,
                &state(Some(&s), Some(&l), false),
                "uid-next",
                &fresh(),
                Some("uid-old")
            ),
            Ok(vec![Verdict::Stamp, Verdict::Stamp])
        );
        // Naming another UID adopts nothing, and says which UID it would have to name.
        let wrong = judge(
            NS,
            &state(Some(&s), Some(&l), false),
            "uid-next",
            &fresh(),
            Some("uid-other"),
        );
        let Err(NameHold::NotAdopted(m)) = wrong else {
            panic!("adopted under another uid: {wrong:?}")
        };
        assert!(
            m.contains("names uid-other, not uid-old") && m.contains("adopt-state=uid-old"),
            "{m}"
        );
        // Once stamped the state is the object's own, the annotation or not.
        let ours = meta(&[(keys::ANNOTATION_OWNER_UID, "uid-next")]);
        assert_eq!(
            judge(
                NS,
                &state(Some(&ours), Some(&ours), false),
                "uid-next",
                &fresh(),
                Some("uid-old")
            ),
            Ok(vec![Verdict::Ours, Verdict::Ours])
        );
    }

    #[test]
    fn state_planted_under_a_future_name_is_not_used() {
        // Crafted state left under a name another team will create: released by a co-tenant's
        // object of that name (or carrying a made-up released-by), bound to another object, or
        // bound to nothing at all. None of it is used by the object that comes to that name.
        let crafted = released("uid-of-the-co-tenant");
        assert!(matches!(
            judge(NS, &state(Some(&crafted), None, false), "uid-victim", &fresh(), None),
            Err(NameHold::NotAdopted(_))
        ));
        let bound = meta(&[(keys::ANNOTATION_OWNER_UID, "uid-of-the-co-tenant")]);
        assert!(matches!(
            judge(NS, &state(Some(&bound), None, false), "uid-victim", &fresh(), Some("uid-of-the-co-tenant")),
            Err(NameHold::Conflict(m)) if m.contains("uid-of-the-co-tenant")
        ));
        let unbound = ObjectMeta::default();
        assert!(matches!(
            judge(NS, &state(Some(&unbound), None, false), "uid-victim", &fresh(), None),
            Err(NameHold::Conflict(_))
        ));
        // A state the object released itself is never taken back by a late pass of it.
        let mine = released("uid-victim");
        assert!(matches!(
            judge(NS, &state(Some(&mine), None, true), "uid-victim", &fresh(), None),
            Err(NameHold::Conflict(_))
        ));
    }

    #[test]
    fn state_emptied_by_a_destroy_is_taken_over_by_the_next_object_of_the_name() {
        let (s, l) = (released("uid-old"), released("uid-old"));
        assert_eq!(
            judge(NS, &state(Some(&s), Some(&l), true), "uid-next", &fresh(), None),
            Ok(vec![Verdict::Stamp, Verdict::Stamp])
        );
        // Asked to adopt another object's state, it does not settle for an empty one.
        assert!(matches!(
            judge(
                NS,
                &state(Some(&s), Some(&l), true),
                "uid-next",
                &fresh(),
                Some("uid-other")
            ),
            Err(NameHold::NotAdopted(_))
        ));
    }

    #[test]
    fn an_adoption_that_finds_no_state_starts_nothing() {
        assert!(matches!(
            judge(NS, &state(None, None, true), "uid-next", &fresh(), Some("uid-old")),
            Err(NameHold::NotAdopted(m)) if m.contains("does not exist")
        ));
        assert_eq!(
            judge(NS, &state(None, None, true), "uid-next", &fresh(), None),
            Ok(vec![Verdict::Absent, Verdict::Absent])
        );
    }

    #[test]
    fn a_conflict_is_named_before_an_unadopted_state() {
        let s = released("uid-old");
        let theirs = meta(&[(keys::ANNOTATION_OWNER_UID, "uid-other")]);
        assert!(matches!(
            judge(NS, &state(Some(&s), Some(&theirs), false), "uid-next", &fresh(), None),
            Err(NameHold::Conflict(m)) if m.contains("Lease team-a/lock-tfstate-default-prod-tc")
        ));
    }

    #[test]
    fn the_adopt_annotation_is_read_trimmed_and_an_empty_one_adopts_nothing() {
        assert_eq!(adopts(&meta(&[(keys::ANNOTATION_ADOPT_STATE, " u1 ")])), Some("u1"));
        assert_eq!(adopts(&meta(&[(keys::ANNOTATION_ADOPT_STATE, "")])), None);
        assert_eq!(adopts(&ObjectMeta::default()), None);
    }
}
