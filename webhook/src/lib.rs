//! `captf-webhook`: the admission webhook (DESIGN.md §9).

/// The route that returns defaults as a JSON patch.
pub const MUTATE_PATH: &str = "/mutate";
/// The route that validates.
pub const VALIDATE_PATH: &str = "/validate";
