//! A decision body answered: dispatched to the direct path or the token tree; a tree's
//! requests prepared, queued as one job, read out, and the places several span labels claim
//! settled by a second short job.

use std::time::{Duration, Instant};

use protocol::answer::DecisionResponse;
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{DecisionBody, DecisionRequest};
use protocol::ProtocolError;

use super::contest;
use super::direct;
use super::locate;
use super::merge;
use super::model::{
    entries, per_root, refusal, Decision, DecisionModel, Engine, Plan, Prepared, Reading, Timings,
    Tree,
};
use crate::backend::{Node, RootLogits, Token};
use crate::error::EngineError;
use crate::scheduler::JobError;

impl DecisionModel {
    /// The whole token sequence each valid question of `r` is read from (system prompt, state,
    /// question block), as a runtime without shared prefixes would evaluate it. For benchmarks
    /// that compare against plain llama.cpp; a direct model has no such sequences.
    pub fn question_sequences(&self, r: &DecisionRequest) -> Result<Vec<Vec<Token>>, EngineError> {
        let Engine::Tree(t) = &self.engine else {
            return Ok(Vec::new());
        };
        let p = self.prepare(t, r).map_err(EngineError::Request)?;
        Ok(p.roots
            .iter()
            .flat_map(|root| {
                root.children.iter().map(|q| {
                    let mut seq = t.prefix.clone();
                    seq.extend_from_slice(&root.tokens);
                    seq.extend_from_slice(&q.tokens);
                    seq
                })
            })
            .collect())
    }

    /// The adapter features (`adapter::feature_tokens`' logits) at each choice, noul and score
    /// question's answer position (its first branch, its first window), by question id, on a
    /// model recording them ([`DecisionModel::recording_features`]): what `vllm-srun adapt`
    /// trains heads on. A question that failed, or of another type, has `None`.
    pub async fn adapter_features(
        &self,
        r: &DecisionRequest,
    ) -> Result<Vec<(String, Option<Vec<f32>>)>, EngineError> {
        let Engine::Tree(t) = &self.engine else {
            return Err(EngineError::Forward(
                "a direct model has no adapter features".into(),
            ));
        };
        let prepared = vec![self.prepare(t, r)];
        refusal(false, &prepared)?;
        let mut timings = Timings::default();
        let logits = self
            .forward(t, &prepared, None, &mut timings)
            .await?
            .map_err(|f| EngineError::Forward(f.message))?;
        let Some(Ok(p)) = prepared.first() else {
            return Ok(Vec::new());
        };
        let reading = self.read(t, p, per_root(p, &mut logits.iter()));
        Ok(reading
            .groups
            .iter()
            .zip(reading.features)
            .map(|((plan, _), h)| (plan.id().to_string(), h))
            .collect())
    }

    /// Answer a decision body. Request-level failures are errors; question-level failures
    /// are answered in place.
    pub async fn decide(
        &self,
        body: &DecisionBody,
        started: Instant,
    ) -> Result<(Decision, Timings), EngineError> {
        let signals = self.with_router_signals(body);
        let body = signals.as_ref().unwrap_or(body);
        match &self.detector {
            // The detector reads the pictures while the text questions run.
            Some(detector) if locate::asks_boxes(body, detector.kinds()) => {
                let (text, located) =
                    tokio::join!(self.decide_text(body, started), self.locate(detector, body));
                let (mut decision, timings) = text?;
                locate::place(&mut decision, located);
                Ok((decision, timings))
            }
            _ => self.decide_text(body, started).await,
        }
    }

    /// A body's questions answered by the model's text engine (box questions left as
    /// stand-ins for `locate`).
    pub(super) async fn decide_text(
        &self,
        body: &DecisionBody,
        started: Instant,
    ) -> Result<(Decision, Timings), EngineError> {
        match &self.engine {
            Engine::Tree(t) => self.decide_tree(t, body, started).await,
            Engine::Direct(d) => direct::decide(self, &**d, body, started),
        }
    }

    /// The body with every question whose id names one of the package's router signals
    /// asked as the package words it; `None` when no question does.
    fn with_router_signals(&self, body: &DecisionBody) -> Option<DecisionBody> {
        if self.config.router_questions.is_empty() {
            return None;
        }
        let rewrite = |r: &DecisionRequest| -> Option<DecisionRequest> {
            let mut changed = false;
            let questions = r
                .questions
                .iter()
                .map(|s| match self.config.as_router_signal(s) {
                    Some(signal) => {
                        changed = true;
                        signal
                    }
                    None => s.clone(),
                })
                .collect();
            changed.then(|| DecisionRequest {
                questions,
                ..r.clone()
            })
        };
        match body {
            DecisionBody::Single(r) => rewrite(r).map(DecisionBody::Single),
            DecisionBody::Batch {
                model,
                options,
                entries,
            } => {
                let mut changed = false;
                let entries = entries
                    .iter()
                    .map(|(name, r)| {
                        let signal = rewrite(r);
                        changed |= signal.is_some();
                        (name.clone(), signal.unwrap_or_else(|| r.clone()))
                    })
                    .collect();
                changed.then(|| DecisionBody::Batch {
                    model: model.clone(),
                    options: options.clone(),
                    entries,
                })
            }
        }
    }

    async fn decide_tree(
        &self,
        t: &Tree,
        body: &DecisionBody,
        started: Instant,
    ) -> Result<(Decision, Timings), EngineError> {
        let t0 = Instant::now();
        let requests = entries(body);
        let batch = matches!(body, DecisionBody::Batch { .. });
        let mut prepared: Vec<Result<Prepared, ProtocolError>> =
            requests.iter().map(|(_, r)| self.prepare(t, r)).collect();
        refusal(batch, &prepared)?;
        // Empty-state answers not yet remembered ride in the same forward, read raw, as one
        // more request after the body's.
        let (corrected, mut content_free) = self.content_free(&requests, &t.remembered);
        let asked = content_free.request.take().and_then(|(request, keys)| {
            let mut p = self.prepare(t, &request).ok()?;
            for (_, plan, _) in &mut p.plans {
                plan.at_unit_temperature();
            }
            prepared.push(Ok(p));
            Some(keys)
        });
        let mut timings = Timings {
            tokenize: t0.elapsed(),
            ..Timings::default()
        };
        let deadline = body
            .options()
            .deadline_ms
            .map(|ms| started + Duration::from_millis(ms));
        let outcome = self.forward(t, &prepared, deadline, &mut timings).await?;
        let t_post = Instant::now();
        let mut logits = match &outcome {
            Ok(l) => l.iter(),
            Err(_) => [].iter(),
        };
        let mut readings: Vec<Result<Reading, ProtocolError>> = prepared
            .iter()
            .map(|p| match p {
                Ok(p) => Ok(self.read(t, p, per_root(p, &mut logits))),
                Err(e) => Err(e.clone()),
            })
            .collect();
        let failure = outcome.as_ref().err();
        if let Some(keys) = asked {
            if let Some(Ok(r)) = readings.pop() {
                self.remember(&t.remembered, &mut content_free.known, keys, &r);
            }
        }
        for (reading, keys) in readings.iter_mut().zip(&corrected) {
            if let Ok(r) = reading {
                self.correct(&content_free.known, keys, r);
            }
        }
        timings.post = t_post.elapsed();
        let contests = match failure {
            None => {
                self.contest(t, &mut readings, deadline, &mut timings)
                    .await?
            }
            Some(_) => Vec::new(),
        };
        let t_post = Instant::now();
        let mut responses = Vec::with_capacity(prepared.len());
        for (i, ((name, req), reading)) in requests.iter().zip(readings).enumerate() {
            let resp = match reading {
                Ok(mut r) => {
                    for (q, spans) in r.spans.iter_mut().enumerate() {
                        if let Some(all) = spans.take() {
                            let mine = contests
                                .iter()
                                .filter(|(c, _)| c.request == i && c.question == q);
                            *spans = Some(contest::settle(all, mine));
                        }
                    }
                    self.response(r.groups, r.spans, failure, r.usage)
                }
                Err(e) => self.refused(req, &e),
            };
            responses.push((name.to_string(), resp));
        }
        timings.post += t_post.elapsed();
        Ok((self.finish(batch, responses)?, timings))
    }

    /// Settle the places several labels of a span question claim (see `contest`): one more
    /// job asks the check of every contest of the body, and its tokens count in the usage of
    /// the request each check is for. A contest whose check could not be asked (refused, its
    /// deadline passed, or the queue full) is left unsettled.
    async fn contest(
        &self,
        t: &Tree,
        readings: &mut [Result<Reading<'_>, ProtocolError>],
        deadline: Option<Instant>,
        timings: &mut Timings,
    ) -> Result<Vec<(contest::Contest, Option<String>)>, EngineError> {
        let mut found = Vec::new();
        for (r, reading) in readings.iter().enumerate() {
            let Ok(reading) = reading else { continue };
            let plans = reading.groups.iter().filter_map(|(plan, _)| match plan {
                Plan::Span {
                    labels,
                    text,
                    reads,
                    ..
                } => Some((labels, text, reads)),
                _ => None,
            });
            for (q, ((labels, text, reads), spans)) in plans.zip(&reading.spans).enumerate() {
                if let Some(spans) = spans {
                    found.extend(contest::find(r, q, spans, labels, text, reads));
                }
            }
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let unsettled =
            |found: Vec<contest::Contest>| found.into_iter().map(|c| (c, None)).collect();
        let Ok((body, asked)) = contest::checks(&found) else {
            return Ok(unsettled(found));
        };
        let prepared: Vec<Result<Prepared, ProtocolError>> = entries(&body)
            .iter()
            .map(|(_, r)| self.prepare(t, r))
            .collect();
        // The spans are read: a check that cannot run now leaves its contests to the
        // probability rule rather than fail the work done.
        let logits = match self.forward(t, &prepared, deadline, timings).await {
            Ok(Ok(logits)) => logits,
            Ok(Err(_)) | Err(EngineError::Overloaded) => return Ok(unsettled(found)),
            Err(e) => return Err(e),
        };
        let mut logits = logits.iter();
        let answers: Vec<Option<DecisionResponse>> = prepared
            .iter()
            .map(|p| {
                let p = p.as_ref().ok()?;
                let r = self.read(t, p, per_root(p, &mut logits));
                Some(self.response(r.groups, r.spans, None, r.usage))
            })
            .collect();
        // Each entry's tokens count once, in the usage of the request it checks.
        let mut counted = vec![false; answers.len()];
        let mut settled = Vec::with_capacity(found.len());
        for (c, (entry, id)) in found.into_iter().zip(asked) {
            let Some(Ok(reading)) = readings.get_mut(c.request) else {
                settled.push((c, None));
                continue;
            };
            let answer = answers.get(entry).and_then(Option::as_ref);
            if let (Some(a), Some(seen)) = (answer, counted.get_mut(entry)) {
                if !*seen {
                    reading.usage.add(&a.usage);
                    *seen = true;
                }
            }
            let spans = reading.spans.get(c.question).and_then(Option::as_ref);
            let won = match (answer, spans) {
                (Some(a), Some(spans)) => contest::winner(&c, spans, a, &id),
                _ => None,
            };
            settled.push((c, won));
        }
        Ok(settled)
    }

    /// Queue every root of `prepared` that has a question to evaluate, as one job; the logits
    /// of those roots in order, or the failure every question of the job shares.
    async fn forward(
        &self,
        t: &Tree,
        prepared: &[Result<Prepared, ProtocolError>],
        deadline: Option<Instant>,
        timings: &mut Timings,
    ) -> Result<Result<Vec<RootLogits>, QuestionFailure>, EngineError> {
        let roots: Vec<Node> = prepared
            .iter()
            .filter_map(|p| p.as_ref().ok())
            .flat_map(|p| p.roots.iter())
            .filter(|root| !root.children.is_empty())
            .cloned()
            .collect();
        if roots.is_empty() {
            return Ok(Ok(Vec::new()));
        }
        let (roots, merged) = merge::merge(roots);
        match t.worker.submit(roots, deadline).await {
            Ok(out) => {
                timings.queue += out.queue;
                timings.forward += out.forward;
                timings.batch_jobs = timings.batch_jobs.max(out.batch_jobs);
                timings.batch_tokens += out.batch_tokens;
                timings.cached_tokens += out.cached_tokens;
                Ok(Ok(match merged {
                    Some(m) => {
                        timings.cached_tokens += m.saved_tokens;
                        m.expand(out.logits)
                    }
                    None => out.logits,
                }))
            }
            Err(JobError::DeadlineExceeded) => Ok(Err(QuestionFailure::new(
                QuestionErrorKind::DeadlineExceeded,
                reason::DEADLINE,
                "options.deadline_ms passed before the model answered",
            ))),
            Err(JobError::Overloaded) => Err(EngineError::Overloaded),
            Err(JobError::OutOfMemory { shared }) => Err(EngineError::OutOfMemory { shared }),
            Err(JobError::Unavailable) => Err(EngineError::Unavailable),
            Err(JobError::Forward(m)) => Err(EngineError::Forward(m)),
        }
    }
}
