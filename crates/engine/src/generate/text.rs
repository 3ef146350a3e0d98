//! A model's text-generation surface: chat prompts from its own template, constrained output
//! (JSON schemas, tool calls) as grammars, and the generation worker, started on first use so
//! that a process that only asks decisions holds no generation cache.

use std::sync::{Arc, Mutex};

use protocol::error::{reason, ProtocolError};
use protocol::openai::{
    content_text, ChatCompletionRequest, ResponseFormat, SamplingParams, ToolMode,
};
use serde_json::{json, Map, Value};

use super::chat::ChatTemplate;
use super::{GenerateConfig, GenerateJob, Generation};
use crate::backend::{Backend, Sampling, Token};
use crate::error::EngineError;

/// What a chat request becomes before it is queued.
#[derive(Debug, Clone)]
pub struct ChatPlan {
    pub job: GenerateJob,
    pub tools: ToolMode,
}

/// The generation surface of one causal LM.
pub struct TextModel {
    name: String,
    backend: Arc<dyn Backend>,
    template: ChatTemplate,
    config: GenerateConfig,
    worker: Mutex<Option<Arc<Generation>>>,
}

impl std::fmt::Debug for TextModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextModel")
            .field("name", &self.name)
            .finish()
    }
}

fn request_error(reason: &'static str, param: &str, message: impl Into<String>) -> EngineError {
    EngineError::Request(ProtocolError::schema(&[param], message).with_reason(reason))
}

/// A message as chat templates read it: text content, tool calls with their arguments as
/// objects, `developer` read as `system`.
fn template_message(m: &protocol::openai::ChatMessage) -> Result<Value, ProtocolError> {
    let role = if m.role == "developer" {
        "system"
    } else {
        m.role.as_str()
    };
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    out.insert("content".into(), json!(content_text(&m.content)?));
    if let Some(n) = &m.name {
        out.insert("name".into(), json!(n));
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    if let Some(calls) = &m.tool_calls {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                let mut c = c.clone();
                if let Some(args) = c
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .and_then(|a| serde_json::from_str::<Value>(a).ok())
                {
                    c["function"]["arguments"] = args;
                }
                c
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Value::Object(out))
}

/// A seed when the request gives none.
fn fresh_seed() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(0)
}

impl TextModel {
    pub fn new(
        name: &str,
        backend: Arc<dyn Backend>,
        config: GenerateConfig,
    ) -> Result<TextModel, EngineError> {
        let (bos, eos) = backend.bos_eos_text();
        let template = ChatTemplate::new(backend.chat_template(), bos, eos)?;
        Ok(TextModel {
            name: name.to_string(),
            backend,
            template,
            config,
            worker: Mutex::new(None),
        })
    }

    pub fn config(&self) -> &GenerateConfig {
        &self.config
    }

    /// The served model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The running worker, if one was started.
    pub fn running(&self) -> Option<Arc<Generation>> {
        self.worker.lock().ok().and_then(|w| w.clone())
    }

    /// The worker, started on first use (blocking: call it off the async threads).
    pub fn worker(&self) -> Result<Arc<Generation>, EngineError> {
        let mut w = self.worker.lock().map_err(|_| EngineError::Unavailable)?;
        if let Some(g) = w.as_ref() {
            return Ok(g.clone());
        }
        let g = Arc::new(Generation::start(
            &self.name,
            self.backend.clone(),
            self.config,
        )?);
        *w = Some(g.clone());
        Ok(g)
    }

    /// Tokens one generation holds, prompt and output together.
    pub fn slot_tokens(&self) -> usize {
        self.config.context_tokens.max(256).div_ceil(256) as usize * 256
    }

    fn sampling(&self, p: &SamplingParams, grammar: Option<String>) -> Sampling {
        Sampling {
            temperature: p.temperature,
            top_p: p.top_p,
            seed: p.seed.map(|s| s as u32).unwrap_or_else(fresh_seed),
            grammar,
            logprobs: false,
            top_logprobs: 0,
        }
    }

    /// A job for `prompt`, checked against the slot's room.
    fn job(
        &self,
        prompt: Vec<Token>,
        p: &SamplingParams,
        sampling: Sampling,
    ) -> Result<GenerateJob, EngineError> {
        let room = self.slot_tokens();
        if prompt.len() + 1 >= room {
            return Err(EngineError::Request(
                ProtocolError::schema(
                    &["messages"],
                    format!(
                        "the prompt has {} tokens; this model generates from at most {}",
                        prompt.len(),
                        room - 2
                    ),
                )
                .with_reason(reason::CONTEXT_LENGTH)
                .with_limit(room as u64 - 2),
            ));
        }
        let max_tokens = p
            .max_tokens
            .map(|m| m as usize)
            .unwrap_or(room)
            .min(room - prompt.len());
        Ok(GenerateJob {
            prompt,
            max_tokens,
            sampling,
            stop: p.stop.clone(),
            deadline: None,
        })
    }

    /// A plain-text prompt (completions, SIE generate).
    pub fn text_job(&self, prompt: &str, p: &SamplingParams) -> Result<GenerateJob, EngineError> {
        if prompt.is_empty() {
            return Err(request_error(
                reason::PARAMETER_INVALID,
                "prompt",
                "the prompt is empty",
            ));
        }
        let tokens = self.backend.tokenize(prompt, false)?;
        self.job(tokens, p, self.sampling(p, None))
    }

    fn grammar(&self, schema: &Value) -> Result<String, EngineError> {
        self.backend
            .schema_grammar(&schema.to_string())
            .map_err(|e| request_error(reason::RESPONSE_FORMAT, "response_format", e.to_string()))
    }

    /// A chat request: its prompt from the model's template, its output grammar.
    pub fn chat_plan(
        &self,
        r: &ChatCompletionRequest,
        p: &SamplingParams,
    ) -> Result<ChatPlan, EngineError> {
        let messages = r
            .messages
            .iter()
            .map(template_message)
            .collect::<Result<Vec<_>, _>>()
            .map_err(EngineError::Request)?;
        let tools = r.tool_mode().map_err(EngineError::Request)?;
        let defs: Vec<Value> = r
            .tools
            .iter()
            .flatten()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .collect();
        let mut kwargs = r.chat_template_kwargs.clone().unwrap_or_default();
        if let Some(e) = &r.reasoning_effort {
            kwargs.entry("reasoning_effort").or_insert(json!(e));
        }
        let shown = match tools {
            ToolMode::None => None,
            _ => Some(defs.as_slice()),
        };
        let text = self.template.render(&messages, shown, &kwargs)?;
        let prompt = self.backend.tokenize(&text, true)?;
        let grammar = match (&tools, &r.response_format) {
            (ToolMode::Required(which), _) => {
                let calls: Vec<Value> = which
                    .iter()
                    .filter_map(|&i| r.tools.as_ref()?.get(i))
                    .map(|t| {
                        json!({
                            "type": "object",
                            "properties": {
                                "name": {"const": t.function.name},
                                "arguments": t.function.parameters.clone()
                                    .unwrap_or_else(|| json!({"type": "object"})),
                            },
                            "required": ["name", "arguments"],
                            "additionalProperties": false,
                        })
                    })
                    .collect();
                let schema = if calls.len() == 1 {
                    calls.into_iter().next().unwrap_or_default()
                } else {
                    json!({"anyOf": calls})
                };
                Some(self.grammar(&schema)?)
            }
            (_, Some(ResponseFormat::JsonObject)) => {
                Some(self.grammar(&json!({"type": "object"}))?)
            }
            (_, Some(ResponseFormat::JsonSchema { json_schema })) => Some(
                self.grammar(
                    json_schema
                        .schema
                        .as_ref()
                        .unwrap_or(&json!({"type": "object"})),
                )?,
            ),
            _ => None,
        };
        let mut sampling = self.sampling(p, grammar);
        sampling.logprobs = r.logprobs == Some(true);
        sampling.top_logprobs = if sampling.logprobs {
            r.top_logprobs.unwrap_or(0) as usize
        } else {
            0
        };
        Ok(ChatPlan {
            job: self.job(prompt, p, sampling)?,
            tools,
        })
    }
}
