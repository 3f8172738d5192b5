//! `/convert`: the CRDs' conversion webhook (a `ConversionReview` of `apiextensions.k8s.io/v1`),
//! over the one conversion module, `captf_shared::conversion`.
//!
//! A body that is not a ConversionReview is refused with 400 and a reason (as `/mutate` and
//! `/validate` refuse what is not an AdmissionReview). A review whose objects cannot all be
//! converted (an unknown version or kind, a malformed object) is answered with a failed result
//! naming the first object that failed and why, and no object: the API server then fails the
//! request that needed the conversion and keeps what it stored as it was.

use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::Value;

use crate::admission::{KindLabel, MAX_MESSAGE_BYTES, OperationLabel, ResultLabel, ReviewError, Reviewed};

/// The apiVersion of the ConversionReviews served.
pub const CONVERSION_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// Answer one ConversionReview. `result` is `allowed` when every object was converted and
/// `denied` when the review failed.
pub fn review(body: &[u8]) -> Result<Reviewed, ReviewError> {
    let whole: ConversionReview = serde_json::from_slice(body).map_err(ReviewError::NotConversionReview)?;
    if whole.types.api_version != CONVERSION_API_VERSION || whole.types.kind != "ConversionReview" {
        return Err(ReviewError::WrongConversionReview {
            api_version: cut(&whole.types.api_version),
            kind: cut(&whole.types.kind),
        });
    }
    let mut request = ConversionRequest::from_review(whole).map_err(|_| ReviewError::NoConversionRequest)?;
    let uid = request.uid.clone();
    let desired = request.desired_api_version.clone();
    let kind = request.objects.first().map_or(KindLabel::None, |o| {
        KindLabel::of(o.get("kind").and_then(Value::as_str).unwrap_or(""))
    });
    let sent = std::mem::take(&mut request.objects);
    let count = sent.len();
    let mut objects = Vec::with_capacity(count);
    let mut failure = None;
    for (i, object) in sent.into_iter().enumerate() {
        let named = who(&object);
        match captf_shared::conversion::convert(object, &desired) {
            Ok(converted) => objects.push(converted),
            Err(e) => {
                failure = Some(format!("cannot convert object {i} of {count} ({named}): {e}"));
                break;
            }
        }
    }
    let (response, result, message) = match failure {
        None => (
            ConversionResponse::for_request(request).success(objects),
            ResultLabel::Allowed,
            None,
        ),
        Some(message) => {
            let message = captf_shared::validation::cut_to_bytes(&message, MAX_MESSAGE_BYTES).to_string();
            (
                ConversionResponse::for_request(request).failure(Status::failure(&message, "ConversionFailed")),
                ResultLabel::Denied,
                Some(message),
            )
        }
    };
    let body = serde_json::to_vec(&response.into_review()).map_err(ReviewError::NotJson)?;
    Ok(Reviewed {
        body,
        kind,
        operation: OperationLabel::None,
        result,
        uid,
        namespace: String::new(),
        name: format!("{count} object(s) to {}", cut(&desired)),
        message,
        approve: None,
    })
}

/// `kind namespace/name` of an object, for a message.
fn who(object: &Value) -> String {
    let s = |p: &str| cut(object.pointer(p).and_then(Value::as_str).unwrap_or("?"));
    format!("{} {}/{}", s("/kind"), s("/metadata/namespace"), s("/metadata/name"))
}

/// At most as much of what a request sent as the conversion's own messages quote.
fn cut(s: &str) -> String {
    captf_shared::validation::cut_to_bytes(s, captf_shared::conversion::MAX_ECHOED_BYTES).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn review_of(desired: &str, objects: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "r-1", "desiredAPIVersion": desired, "objects": objects},
        }))
        .unwrap()
    }

    fn cluster(version: &str, status: Value) -> Value {
        json!({
            "apiVersion": format!("infrastructure.cluster.x-k8s.io/{version}"),
            "kind": "TerraformCluster",
            "metadata": {"name": "prod-eu", "namespace": "default"},
            "spec": {"module": {"source": "git::https://example.com/m.git"}},
            "status": status,
        })
    }

    #[test]
    fn convert_answers_every_object_at_the_desired_version_with_the_request_uid() {
        let body = review_of(
            "infrastructure.cluster.x-k8s.io/v1beta1",
            vec![
                cluster(
                    "v1alpha1",
                    json!({"ready": true, "initialization": {"provisioned": true}}),
                ),
                cluster("v1beta1", json!({})),
            ],
        );
        let answered = review(&body).unwrap();
        assert_eq!(answered.result, ResultLabel::Allowed);
        assert_eq!(answered.kind, KindLabel::TerraformCluster);
        let v: Value = serde_json::from_slice(&answered.body).unwrap();
        assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(v["kind"], "ConversionReview");
        assert_eq!(v["response"]["uid"], "r-1");
        assert_eq!(v["response"]["result"]["status"], "Success");
        let objects = v["response"]["convertedObjects"].as_array().unwrap();
        assert_eq!(objects.len(), 2);
        for o in objects {
            assert_eq!(o["apiVersion"], "infrastructure.cluster.x-k8s.io/v1beta1");
        }
    }

    #[test]
    fn convert_an_object_that_cannot_be_converted_fails_the_review_naming_it() {
        let mut bad = cluster("v1alpha1", json!({}));
        bad["kind"] = json!("Deployment");
        let body = review_of(
            "infrastructure.cluster.x-k8s.io/v1beta1",
            vec![cluster("v1alpha1", json!({})), bad],
        );
        let answered = review(&body).unwrap();
        assert_eq!(answered.result, ResultLabel::Denied);
        let v: Value = serde_json::from_slice(&answered.body).unwrap();
        assert_eq!(v["response"]["result"]["status"], "Failure");
        let message = v["response"]["result"]["message"].as_str().unwrap();
        assert!(
            message.contains("object 1 of 2 (Deployment default/prod-eu)"),
            "{message}"
        );
        assert!(
            message.contains("kind \"Deployment\" is not one of CAPTF's"),
            "{message}"
        );
        assert_eq!(v["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn convert_an_unknown_desired_version_fails_the_review_naming_it() {
        let body = review_of(
            "infrastructure.cluster.x-k8s.io/v9",
            vec![cluster("v1alpha1", json!({}))],
        );
        let answered = review(&body).unwrap();
        let v: Value = serde_json::from_slice(&answered.body).unwrap();
        let message = v["response"]["result"]["message"].as_str().unwrap();
        assert!(message.contains("\"infrastructure.cluster.x-k8s.io/v9\""), "{message}");
    }

    #[test]
    fn convert_refuses_what_is_not_a_conversion_review() {
        assert!(matches!(review(b"{"), Err(ReviewError::NotConversionReview(_))));
        let admission = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "desiredAPIVersion": "x", "objects": []}});
        assert!(matches!(
            review(&serde_json::to_vec(&admission).unwrap()),
            Err(ReviewError::WrongConversionReview { .. })
        ));
        let no_request = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"});
        assert!(matches!(
            review(&serde_json::to_vec(&no_request).unwrap()),
            Err(ReviewError::NoConversionRequest)
        ));
    }
}
