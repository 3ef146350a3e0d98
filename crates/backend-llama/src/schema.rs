//! Outputs held to a JSON schema (`response_format`, forced tool calls): llguidance compiles the
//! schema into a parser whose token mask the sampler chain applies at every step.
//!
//! The backend's grammar notation ([`engine::backend::Backend::schema_grammar`]) is the schema
//! itself with the output's layout under `x-guidance`; it is compiled once when the request is
//! planned (a schema llguidance cannot hold an output to is refused there) and again for the
//! slot that samples it. The parser factory (the model's vocabulary as a token trie, a walk of
//! every token) is built once per model, on first use.

use std::sync::OnceLock;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

/// One model's JSON-schema samplers.
#[derive(Default)]
pub(crate) struct Schemas {
    factory: OnceLock<Result<ParserFactory, SchemaError>>,
}

/// Why a schema cannot hold an output.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum SchemaError {
    /// The model's vocabulary does not make a parser factory.
    #[error("the vocabulary does not build a parser: {0}")]
    Factory(String),
    #[error("it is not JSON: {0}")]
    NotJson(String),
    /// llguidance cannot hold an output to it.
    #[error("{0}")]
    Unsupported(String),
}

/// The layout of an output: JSON on one line, with a space after each separator (as
/// `json.dumps` writes it). Where whitespace is free, a small model can fill the output with it.
/// Keywords llguidance does not hold an output to are ignored (`lenient`), and `oneOf` is read
/// as `anyOf`, as llama.cpp's own converter reads them.
fn layout() -> Value {
    json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": true,
        "coerce_one_of": true,
    })
}

impl Schemas {
    fn factory(&self, model: &LlamaModel) -> Result<&ParserFactory, SchemaError> {
        self.factory
            .get_or_init(|| {
                let env = LlamaSampler::llguidance_tok_env(model);
                let mut f = ParserFactory::new_simple(&env)
                    .map_err(|e| SchemaError::Factory(e.to_string()))?;
                f.quiet();
                Ok(f)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn matcher(&self, model: &LlamaModel, schema: Value) -> Result<Matcher, SchemaError> {
        let parser = self
            .factory(model)?
            .create_parser(TopLevelGrammar::from_json_schema(schema));
        let m = Matcher::new(parser);
        match m.get_error() {
            Some(e) => Err(SchemaError::Unsupported(e)),
            None => Ok(m),
        }
    }

    /// The grammar for outputs that are JSON documents valid under `schema` (JSON text).
    pub(crate) fn grammar(&self, model: &LlamaModel, schema: &str) -> Result<String, SchemaError> {
        let mut schema: Value =
            serde_json::from_str(schema).map_err(|e| SchemaError::NotJson(e.to_string()))?;
        if let Value::Object(members) = &mut schema {
            members.entry("x-guidance").or_insert_with(layout);
        }
        self.matcher(model, schema.clone())?;
        Ok(schema.to_string())
    }

    /// A sampler that masks every token the grammar's output cannot continue with.
    pub(crate) fn sampler(
        &self,
        model: &LlamaModel,
        grammar: &str,
    ) -> Result<LlamaSampler, SchemaError> {
        let schema: Value =
            serde_json::from_str(grammar).map_err(|e| SchemaError::NotJson(e.to_string()))?;
        Ok(LlamaSampler::from(self.matcher(model, schema)?))
    }
}
