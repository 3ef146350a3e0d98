//! The request members other faces name when they read or build a body without decoding it
//! whole (the router passes bodies on, the keys service estimates them). Each is a member of
//! one of this crate's wire types, which the test below checks against their schemas, so a
//! renamed member cannot leave a face reading the old name.

/// Decision requests (`DecisionRequestWire`, `SystemOneBatchWire`; an entry of `requests`
/// or `states` takes the same members).
pub const MODEL: &str = "model";
pub const STATE: &str = "state";
pub const STATES: &str = "states";
pub const QUESTIONS: &str = "questions";
pub const REQUESTS: &str = "requests";
pub const OPTIONS: &str = "options";
pub const ROLES: &str = "roles";
pub const ASSETS: &str = "assets";
pub const IMAGES: &str = "images";
pub const VIDEOS: &str = "videos";

/// A decision request's options (`OptionsWire`).
pub const DEADLINE_MS: &str = "deadline_ms";
pub const LONG_CONTEXT: &str = "long_context";
pub const MAX_TOKENS: &str = "max_tokens";

/// A question (`QuestionWire`) and an asset (`AssetDoc`) both name their kind `type`.
pub const TYPE: &str = "type";
pub const DATA_BASE64: &str = "data_base64";
pub const INSTRUCTIONS: &str = "instructions";
pub const CRITERIA: &str = "criteria";
pub const PRESET: &str = "preset";
pub const OVER: &str = "over";
pub const OVERFLOW: &str = "overflow";
pub const REQUIRE_FULL_INPUT: &str = "require_full_input";

/// A chat completion request (`ChatCompletionRequest`, `ChatMessage`, `ContentPart`).
pub const MESSAGES: &str = "messages";
pub const MAX_COMPLETION_TOKENS: &str = "max_completion_tokens";
pub const ROLE: &str = "role";
pub const CONTENT: &str = "content";
pub const TEXT: &str = "text";

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde::de::DeserializeOwned;
    use utoipa::PartialSchema;

    use crate::openai::{ChatCompletionRequest, ChatMessage, ContentPart};
    use crate::request::{
        DecisionRequestWire, EntryWire, OptionsWire, QuestionWire, SystemOneBatchWire,
    };

    /// Whether a wire type that refuses unknown members takes `member`.
    fn takes<T: DeserializeOwned>(member: &str) -> bool {
        let probe = serde_json::json!({ member: null });
        match serde_json::from_value::<T>(probe) {
            Ok(_) => true,
            Err(e) => !e.to_string().contains("unknown field"),
        }
    }

    fn documented<T: PartialSchema>() -> BTreeSet<String> {
        let v = serde_json::to_value(T::schema()).unwrap_or_default();
        v["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn every_named_member_is_a_member_of_its_wire_type() {
        use super::*;
        assert!(!takes::<DecisionRequestWire>("no_such_member"));
        for m in [
            MODEL, STATE, STATES, QUESTIONS, OPTIONS, ROLES, ASSETS, IMAGES, VIDEOS,
        ] {
            assert!(takes::<DecisionRequestWire>(m), "{m}");
        }
        assert!(takes::<SystemOneBatchWire>(REQUESTS) && takes::<SystemOneBatchWire>(MODEL));
        for m in [STATE, QUESTIONS, ROLES, IMAGES, VIDEOS] {
            assert!(takes::<EntryWire>(m), "{m}");
        }
        for m in [DEADLINE_MS, LONG_CONTEXT, MAX_TOKENS] {
            assert!(takes::<OptionsWire>(m), "{m}");
        }
        for m in [
            TYPE,
            INSTRUCTIONS,
            CRITERIA,
            PRESET,
            OVER,
            OVERFLOW,
            REQUIRE_FULL_INPUT,
        ] {
            assert!(takes::<QuestionWire>(m), "{m}");
        }
        let asset = documented::<crate::assets::AssetDoc>();
        assert!(asset.contains(TYPE) && asset.contains(DATA_BASE64));
        let chat = documented::<ChatCompletionRequest>();
        for m in [MODEL, MESSAGES, MAX_TOKENS, MAX_COMPLETION_TOKENS] {
            assert!(chat.contains(m), "{m} in {chat:?}");
        }
        let message = documented::<ChatMessage>();
        assert!(message.contains(ROLE) && message.contains(CONTENT));
        let part = documented::<ContentPart>();
        assert!(part.contains(TYPE) && part.contains(TEXT));
    }
}
