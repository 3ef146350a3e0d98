//! Preparing a request: every question planned, each view read as far as its questions
//! need, each question placed on its roots, and the request's token limits enforced.

use std::borrow::Cow;
use std::sync::Arc;

use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{DecisionRequest, Overflow, Question, QuestionKind, QuestionSlot, Window};
use protocol::{ProtocolError, Usage};

use super::model::{DecisionModel, Plan, Prepared, Tree};
use super::views::{over_keys, span_part, view_index, RootKey, ViewKey, Views};
use crate::backend::{Grow, Node};
use crate::budget;
use crate::labels::Trie;
use crate::span::CopySteer;

impl DecisionModel {
    /// Render, read within budget and tokenize a request into roots and per-question plans.
    ///
    /// Each view of the state (the whole state, or the keys a question's `over` names) is read
    /// only as far as its questions' budgets need. A question whose budget holds the view reads
    /// it in the shared root; otherwise its `overflow` decides: reject (max_length_exceeded),
    /// truncate (a root of the first `truncate_tokens`), or window (the view read whole up to
    /// the scan budget, in overlapping windows whose answers are combined).
    pub(super) fn prepare(&self, t: &Tree, r: &DecisionRequest) -> Result<Prepared, ProtocolError> {
        self.text_only(r)?;
        let n_decisions = r
            .questions
            .iter()
            .filter(|s| {
                matches!(
                    s.question.as_ref().map(|q| &q.kind),
                    Ok(QuestionKind::Choice { .. }
                        | QuestionKind::Noul { .. }
                        | QuestionKind::Score { .. })
                )
            })
            .count();
        let cap = self.question_cap(r.options.long_context);
        let fixed = t.prefix.len() + t.header.len() + t.sep.len();
        let max_tokens = r.options.max_tokens.map(|t| t as usize);

        // 1. Plan every question; note the view it reads.
        struct Planned<'a> {
            index: usize,
            view: usize,
            q: &'a Question,
            plan: Plan,
            trie: Option<Trie>,
            nodes: Vec<Node>,
            /// Tokens the state may have for this question (cap minus everything else).
            room: usize,
        }
        let mut views: Vec<ViewKey> = Vec::new();
        let mut planned: Vec<Result<Planned, (usize, QuestionFailure)>> = Vec::new();
        // Every question is read at least once: when their texts alone surely pass the
        // request's token limit, none of them is tokenized.
        let least: usize = r
            .questions
            .iter()
            .filter_map(|s| s.question.as_ref().ok())
            .map(|q| {
                let own = q.instructions.as_ref().map_or(0, String::len) + q.kind.text_bytes();
                self.cutter.least_tokens(own)
            })
            .sum();
        if least > self.limits.max_request_tokens {
            return Err(self.over_request_tokens());
        }
        let mut asked = 0usize;
        for (i, slot) in r.questions.iter().enumerate() {
            let q = match &slot.question {
                Ok(q) => q,
                Err(f) => {
                    planned.push(Err((i, f.clone())));
                    continue;
                }
            };
            if let Err(f) = self.image_check(q, slot, r) {
                planned.push(Err((i, f)));
                continue;
            }
            // A span question reads one part, where the model can answer spans at all (else
            // it fails as unsupported in its plan).
            let key = match &q.kind {
                QuestionKind::Span { .. } if t.spans.is_some() => match span_part(r, q) {
                    Ok(part) => part.map_or(ViewKey::State(None), ViewKey::Part),
                    Err(f) => {
                        planned.push(Err((i, f)));
                        continue;
                    }
                },
                _ => ViewKey::State(over_keys(r, q)),
            };
            let view = view_index(&mut views, key);
            let plan = self.plan(t, &slot.id, q, n_decisions, cap);
            // Every question is read at least once (and a block found too long was tokenized
            // up to the cap): once that work passes the request's limit, the rest need not be
            // tokenized to refuse it.
            asked += match &plan {
                Ok((_, nodes, _)) => nodes.iter().map(|n| n.tokens.len()).sum(),
                Err(f) if f.reason == reason::QUESTION_TOKENS => cap,
                Err(_) => 0,
            };
            if asked > self.limits.max_request_tokens {
                return Err(self.over_request_tokens());
            }
            match plan {
                Ok((plan, nodes, trie)) => {
                    // A span branch grows its answer in the same sequence.
                    let grows = if matches!(plan, Plan::Span { .. }) {
                        crate::span::MAX_SPAN_TOKENS
                    } else {
                        0
                    };
                    let longest = nodes.iter().map(|n| n.tokens.len()).max().unwrap_or(0) + grows;
                    planned.push(Ok(Planned {
                        index: i,
                        view,
                        q,
                        plan,
                        trie,
                        nodes,
                        room: cap.saturating_sub(fixed + longest),
                    }));
                }
                Err(f) => planned.push(Err((i, f))),
            }
        }

        // 2. Read each view as far as its roomiest question needs.
        let texts: Vec<Cow<'_, str>> = views.iter().map(|v| Self::view_text(r, *v)).collect();
        let needs: Vec<(usize, usize)> = planned
            .iter()
            .filter_map(|p| p.as_ref().ok())
            .map(|p| (p.view, p.room))
            .collect();
        let mut views = self.read_views(&*t.backend, texts, &needs, max_tokens)?;

        // 3. Place each question on its roots.
        let mut roots: Vec<Node> = Vec::new();
        let mut keyed: Vec<(RootKey, Vec<usize>)> = Vec::new();
        let mut steers: std::collections::HashMap<usize, Arc<CopySteer>> =
            std::collections::HashMap::new();
        let mut plans: Vec<(Vec<usize>, Plan, Option<Trie>)> =
            Vec::with_capacity(r.questions.len());
        let mut usage = Usage {
            input_tokens: t.prefix.len() as u64,
            ..Usage::default()
        };
        let failed = |i: usize, failure: QuestionFailure| -> (Vec<usize>, Plan, Option<Trie>) {
            let slot = &r.questions[i];
            (
                Vec::new(),
                Plan::Failed {
                    id: slot.id.clone(),
                    type_word: slot.type_word.clone(),
                    failure,
                },
                None,
            )
        };
        for p in planned {
            let p = match p {
                Ok(p) => p,
                Err((i, f)) => {
                    plans.push(failed(i, f));
                    continue;
                }
            };
            let id = &r.questions[p.index].id;
            let key = match self.place(
                &*t.backend,
                &mut views,
                p.view,
                id,
                p.q,
                p.room,
                cap,
                max_tokens,
                r.options.window,
            )? {
                Ok(key) => key,
                Err(f) => {
                    plans.push(failed(p.index, f));
                    continue;
                }
            };
            let at = match keyed.iter().position(|(k, _)| *k == key) {
                Some(k) => keyed[k].1.clone(),
                None => {
                    let first = roots.len();
                    for tokens in views.roots(key) {
                        roots.push(self.state_root(t, tokens));
                    }
                    let at: Vec<usize> = (first..roots.len()).collect();
                    keyed.push((key, at.clone()));
                    at
                }
            };
            let mut plan = p.plan;
            match (&mut plan, &t.spans) {
                (
                    Plan::Span {
                        labels,
                        text,
                        reads,
                        asked,
                        ..
                    },
                    Some(vocab),
                ) => {
                    // Each root's span branches copy from the bytes that root read, one per
                    // label those bytes may hold.
                    *text = views.texts[p.view].to_string();
                    for (&root, (offset, bytes)) in
                        at.iter().zip(views.root_bytes(&*t.backend, key))
                    {
                        let mine: Vec<bool> = labels
                            .iter()
                            .map(|(key, d)| crate::span::may_hold(key, d.as_deref(), &bytes))
                            .collect();
                        let steer = steers
                            .entry(root)
                            .or_insert_with(|| {
                                Arc::new(CopySteer::new(vocab.clone(), t.backend.clone(), bytes))
                            })
                            .clone();
                        reads.push((steer.clone(), offset));
                        for (node, _) in p.nodes.iter().zip(&mine).filter(|(_, &a)| a) {
                            let mut node = node.clone();
                            node.grow = Some(Grow(steer.clone()));
                            usage.input_tokens += node.tokens.len() as u64;
                            roots[root].children.push(node);
                        }
                        asked.push(mine);
                    }
                }
                _ => {
                    let own: usize = p.nodes.iter().map(|n| n.tokens.len()).sum();
                    usage.input_tokens += (own * at.len()) as u64;
                    for &root in &at {
                        roots[root].children.extend(p.nodes.iter().cloned());
                    }
                }
            }
            plans.push((at, plan, p.trie));
        }
        views.count(&mut usage, t.header.len() + t.sep.len());
        let total: usize = roots
            .iter()
            .filter(|root| !root.children.is_empty())
            .map(Node::total_tokens)
            .sum();
        self.request_tokens(total)?;
        // A request none of whose questions the text engine evaluates (every one failed, or
        // is a box question the detector answers) reads no tokens.
        if total == 0 {
            usage = Usage::default();
        }
        Ok(Prepared {
            roots,
            plans,
            usage,
        })
    }

    /// Read each view as far as its roomiest question needs; `needs` holds each valid
    /// question's view and room.
    pub(crate) fn read_views<'a>(
        &self,
        vocab: &dyn budget::Vocab,
        texts: Vec<Cow<'a, str>>,
        needs: &[(usize, usize)],
        max_tokens: Option<usize>,
    ) -> Result<Views<'a>, ProtocolError> {
        let mut reads = Vec::with_capacity(texts.len());
        for (v, text) in texts.iter().enumerate() {
            let need = needs
                .iter()
                .filter(|(view, _)| *view == v)
                .map(|(_, room)| max_tokens.map_or(*room, |m| m.min(*room)))
                .max()
                .unwrap_or(0);
            reads.push(self.read_text(vocab, text, need)?);
        }
        let n = texts.len();
        Ok(Views {
            texts,
            reads,
            scans: vec![None; n],
            read_in_part: vec![false; n],
            used: vec![false; n],
        })
    }

    /// How question `id` reads its view: whole when its budget holds it, else as its
    /// `overflow` says (a failure when it rejects, wants the full input, or the view is over
    /// the scan budget).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn place(
        &self,
        vocab: &dyn budget::Vocab,
        views: &mut Views<'_>,
        view: usize,
        id: &str,
        q: &Question,
        room: usize,
        cap: usize,
        max_tokens: Option<usize>,
        window: Option<Window>,
    ) -> Result<Result<RootKey, QuestionFailure>, ProtocolError> {
        let read = &views.reads[view];
        views.used[view] = true;
        let mut budget = max_tokens.map_or(room, |m| m.min(room));
        // Windows the request sizes apply to every view longer than one of them.
        if let (Overflow::Window, Some(w)) = (q.overflow, window) {
            budget = budget.min(usize::try_from(w.tokens).unwrap_or(usize::MAX));
        }
        if read.complete && read.tokens.len() <= budget {
            return Ok(Ok(RootKey::Whole(view)));
        }
        views.read_in_part[view] |= !read.complete;
        Ok(match q.overflow {
            Overflow::Reject => {
                let (limit, why) = match max_tokens {
                    Some(m) if m < room => (m, "options.max_tokens"),
                    _ => (cap, "the model"),
                };
                Err(QuestionFailure::new(
                    QuestionErrorKind::MaxLengthExceeded,
                    reason::QUESTION_TOKENS,
                    format!(
                        "question {id:?} reads more than {limit} tokens with its state, the most {why} allows; send overflow: truncate or window to read it in part or in windows"
                    ),
                )
                .with_limit(limit as u64))
            }
            Overflow::Truncate => {
                let first = budget.min(self.limits.truncate_tokens);
                if q.require_full_input {
                    Err(QuestionFailure::new(
                        QuestionErrorKind::MaxLengthExceeded,
                        reason::INPUT_INCOMPLETE,
                        format!(
                            "require_full_input: question {id:?} would read only the first {first} tokens of its state"
                        ),
                    ))
                } else {
                    Ok(RootKey::Truncated(view, first))
                }
            }
            Overflow::Window => {
                let scan_budget = max_tokens.unwrap_or(self.limits.max_scan_tokens);
                // Windows hold at least every token scanned, so a scan past the request's
                // token limit could only be refused: read no further than that limit.
                let reads = scan_budget.min(self.limits.max_request_tokens);
                if views.scans[view].is_none() {
                    let text = &views.texts[view];
                    // A text surely over the budget by its length alone is not tokenized.
                    let scan = if self.cutter.least_tokens(text.len()) > reads {
                        None
                    } else {
                        Some(self.read_text(vocab, text, reads)?)
                    };
                    let whole = scan.filter(|s| s.complete && s.tokens.len() <= reads);
                    if whole.is_none() && reads < scan_budget {
                        return Err(self.over_request_tokens());
                    }
                    views.scans[view] = Some(whole);
                }
                if matches!(views.scans[view], Some(Some(_))) {
                    // Windows as the request sets them (no larger than the question's room),
                    // else the room, overlapping by an eighth.
                    let size = room.max(1);
                    let (size, overlap) = match window {
                        Some(w) => {
                            let s = usize::try_from(w.tokens).unwrap_or(size).clamp(1, size);
                            let overlap = w.overlap.map_or(s / 8, |o| {
                                usize::try_from(o).unwrap_or(usize::MAX).min(s - 1)
                            });
                            (s, overlap)
                        }
                        None => (size, size / 8),
                    };
                    Ok(RootKey::Windows(view, size, overlap))
                } else {
                    Err(QuestionFailure::new(
                        QuestionErrorKind::ScanBudgetExceeded,
                        reason::SCAN_BUDGET,
                        format!(
                            "question {id:?}: its state has more than {scan_budget} tokens, the scan budget; none of it was read"
                        ),
                    )
                    .with_limit(scan_budget as u64))
                }
            }
        })
    }

    /// A request that reads more tokens than the model reads per request is refused.
    pub(crate) fn request_tokens(&self, total: usize) -> Result<(), ProtocolError> {
        if total > self.limits.max_request_tokens {
            return Err(ProtocolError::invalid(format!(
                "the request reads {total} tokens (its state once and every question); model {} reads at most {} per request",
                self.meta.name, self.limits.max_request_tokens
            ))
            .with_reason(reason::REQUEST_TOKENS)
            .with_limit(self.limits.max_request_tokens as u64));
        }
        Ok(())
    }

    /// The refusal of a request found to read more than `max_request_tokens` before reading
    /// all of it.
    pub(crate) fn over_request_tokens(&self) -> ProtocolError {
        let max = self.limits.max_request_tokens;
        ProtocolError::invalid(format!(
            "the request reads more than {max} tokens (its state once and every question); model {} reads at most {max} per request",
            self.meta.name
        ))
        .with_reason(reason::REQUEST_TOKENS)
        .with_limit(self.limits.max_request_tokens as u64)
    }

    /// A model with no image or video modality refuses a request that sends either; one that
    /// carries a detector reads them for its box and track questions.
    pub(crate) fn text_only(&self, r: &DecisionRequest) -> Result<(), ProtocolError> {
        // A question's own images or videos fail that question alone (`image_check`).
        if (!r.images.is_empty() || !r.videos.is_empty()) && self.detector.is_none() {
            return Err(ProtocolError::invalid(format!(
                "model {} reads text only: it has no image or video modality",
                self.meta.name
            ))
            .with_reason(reason::MODALITY_UNSUPPORTED));
        }
        Ok(())
    }

    /// Images a question references: a box question's target, else refused on this model (it
    /// reads no images in questions; moving them into the state would change other answers).
    pub(crate) fn image_check(
        &self,
        q: &Question,
        slot: &QuestionSlot,
        r: &DecisionRequest,
    ) -> Result<(), QuestionFailure> {
        // A model without box questions answers box_unsupported first (in `plan`).
        if let Some(target) = r.media_target(slot, &q.kind) {
            if !self.config.answers(q.kind.type_name()) {
                return Ok(());
            }
            return target.map(|_| ());
        }
        if slot.images.len() + slot.videos > 0 {
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                reason::QUESTION_IMAGES_UNSUPPORTED,
                format!(
                    "model {} reads no images in a question's instructions or options; put the image in the state",
                    self.meta.name
                ),
            ));
        }
        // A detector reads the state's pictures for box questions, and for a noul or score
        // that asks whether or how many of its kinds are there (`locate` answers it where the
        // text path leaves this stand-in); any other question about them is refused, since it
        // would be answered from the text without seeing them.
        // On the state's only video (and no picture), only whether a kind appears.
        let grounded = self
            .detector
            .as_ref()
            .and_then(|d| super::target::media_grounding(r, q, d.kinds()));
        if let Some(grounded) = grounded {
            return Err(match grounded {
                Ok(_) => QuestionFailure::new(
                    QuestionErrorKind::InvalidQuestion,
                    reason::MODALITY_UNSUPPORTED,
                    "answered from the pictures or the video by the object detector",
                ),
                Err(why) => QuestionFailure::new(
                    QuestionErrorKind::InvalidQuestion,
                    reason::QUESTION_NOT_GROUNDED,
                    format!(
                        "model {} answers questions about pictures from what its object detector sees, and cannot answer this one: {why}",
                        self.meta.name
                    ),
                ),
            });
        }
        if !r.images.is_empty() || !r.videos.is_empty() {
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                reason::MODALITY_UNSUPPORTED,
                format!(
                    "model {} reads images and videos only to answer box and track questions; ask this question about a state without them",
                    self.meta.name
                ),
            ));
        }
        Ok(())
    }
}
