//! The decision endpoints, named once: the worker serves them and the router forwards to them.

/// A path that answers decision bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionEndpoint {
    /// `/v1/decisions`: the runtime's internal form.
    Decisions,
    /// `/v1/systemone`: one System One request.
    SystemOne,
    /// `/v1/systemone/batch`: System One requests keyed by id.
    SystemOneBatch,
}

impl DecisionEndpoint {
    /// Where the endpoint is served.
    pub fn path(self) -> &'static str {
        match self {
            DecisionEndpoint::Decisions => "/v1/decisions",
            DecisionEndpoint::SystemOne => "/v1/systemone",
            DecisionEndpoint::SystemOneBatch => "/v1/systemone/batch",
        }
    }
}
