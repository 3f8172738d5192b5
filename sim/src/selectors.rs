//! Label and field selectors, as `?labelSelector=` and `?fieldSelector=` spell them.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector (`a=b,c!=d,e in (f,g),!h,i`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Split at commas outside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(s: &str) -> Result<Vec<String>, ApiError> {
    let s = s.trim();
    let inner = s.strip_prefix('(').and_then(|x| x.strip_suffix(')')).ok_or_else(|| {
        ApiError::bad_request(format!(
            "unable to parse requirement: expected a set of values, got {s:?}"
        ))
    })?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotIn(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                LabelReq::In(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = part.split_once(" notin ") {
                LabelReq::NotIn(k.trim().into(), set_values(v)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                LabelReq::In(k.trim().into(), set_values(v)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(ApiError::bad_request(format!("unable to parse requirement: {part:?}")));
            } else {
                LabelReq::Exists(part)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// From a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    pub fn from_object(sel: &Value) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelReq::In(
                    k.clone(),
                    vec![v.as_str().unwrap_or_default().to_string()],
                ));
            }
        }
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default().to_string();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            reqs.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => LabelReq::In(key, values),
                Some("NotIn") => LabelReq::NotIn(key, values),
                Some("Exists") => LabelReq::Exists(key),
                Some("DoesNotExist") => LabelReq::NotExists(key),
                other => return Err(ApiError::bad_request(format!("unknown selector operator {other:?}"))),
            });
        }
        Ok(LabelSelector(reqs))
    }

    /// The one value this selector requires of `key` (`key=value`, or `key in (value)`), if it
    /// requires one: the objects it can match all carry that label value.
    pub fn required_value(&self, key: &str) -> Option<&str> {
        self.0.iter().find_map(|r| match r {
            LabelReq::In(k, vs) if k == key && vs.len() == 1 => Some(vs[0].as_str()),
            _ => None,
        })
    }

    /// Does an object (its `metadata.labels`) match?
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
        })
    }
}

/// A parsed field selector (`metadata.name=x,status.phase!=Running`). Any dotted path of the
/// object may be used (kube-apiserver allows only a few per resource); a missing field is `""`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: {part:?}; can't understand it"
                )));
            };
            reqs.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "status": {"phase": "Failed"}})
    }

    #[test]
    fn label_selector_supports_equality_sets_and_existence() {
        let o = obj(json!({"captf.io/op": "apply", "tier": "x"}));
        for (sel, want) in [
            ("captf.io/op=apply", true),
            ("captf.io/op==apply", true),
            ("captf.io/op!=apply", false),
            ("captf.io/op in (drift, apply)", true),
            ("captf.io/op notin (drift,apply)", false),
            ("tier", true),
            ("!tier", false),
            ("missing!=y", true),
            ("captf.io/op=apply,tier=y", false),
            ("", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selector_reads_name_namespace_and_phase() {
        let o = obj(json!({}));
        for (sel, want) in [
            ("metadata.name=a", true),
            ("metadata.namespace=ns,status.phase=Failed", true),
            ("status.phase!=Failed", false),
            ("spec.nodeName=", true),
        ] {
            assert_eq!(FieldSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
        assert!(FieldSelector::parse("nonsense").is_err());
    }

    proptest! {
        #[test]
        fn an_equality_selector_matches_exactly_the_objects_with_that_label(k in "[a-z]{1,8}", v in "[a-z0-9]{0,8}", w in "[a-z0-9]{0,8}") {
            let sel = LabelSelector::parse(&format!("{k}={v}")).unwrap();
            prop_assert_eq!(sel.matches(&obj(json!({ k.clone(): w.clone() }))), v == w);
            let neg = LabelSelector::parse(&format!("{k}!={v}")).unwrap();
            prop_assert_eq!(neg.matches(&obj(json!({ k: w.clone() }))), v != w);
        }
    }
}
