//! Fair admission to one model's places (System Duo, Rate limits, on places).
//!
//! A model has `places`. A request takes one place, or on a model with `slot_tokens`, one
//! per `slot_tokens` of its estimated input tokens (at most `slot_cost_max`), and starts
//! only when that many are free. Waiting requests are ordered by
//! `(max(work of its address, work of its key), work of its key, arrival)`: work is places
//! held, or with `slot_tokens`, estimated tokens held plus tokens admitted in the last
//! `recent_ms`, at least `slot_tokens / 4` per place. A key's requests start in the order
//! they were sent, so only each key's oldest waiting request is a candidate.
//!
//! [`Queue`] is the pure decision structure (time is passed in); [`Gate`] puts it behind a
//! mutex with async waits.
//!
//! Cost: every decision is a few `BTreeSet`/`HashMap` operations on the touched address
//! and key, whatever the number waiting: addresses are indexed by their best candidate,
//! keys within an address by their work, and addresses with waiting requests by load.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::clock::{Clock, Millis};

/// A model's admission settings, as `/api/info` shows them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Requests (or token places) in progress at once.
    pub places: u64,
    /// Requests that may wait for a place.
    pub waiting: usize,
    /// Longest wait for a place, then 429 `server_overloaded`.
    pub max_wait_ms: u64,
    /// Count work in estimated tokens; a request takes one place per this many tokens.
    pub slot_tokens: Option<u64>,
    /// The most places one request takes.
    pub slot_cost_max: u64,
    /// When every waiting place is taken, a new request may take the newest waiting place
    /// of the busiest address.
    pub push_out: bool,
    /// How long admitted tokens count as recent work (with `slot_tokens`).
    pub recent_ms: u64,
    /// The places of requests with box or track questions (`boxshare`).
    #[serde(rename = "box")]
    pub boxes: crate::boxshare::BoxAdmission,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            places: 8,
            waiting: 256,
            max_wait_ms: 5_000,
            slot_tokens: None,
            slot_cost_max: 4,
            push_out: true,
            recent_ms: 10_000,
            boxes: Default::default(),
        }
    }
}

/// Who asks: the address (an IPv6 /64) and the key (or the address again, without keys).
#[derive(Debug, Clone)]
pub struct Ticket {
    pub address: Arc<str>,
    pub key: Arc<str>,
    /// Estimated input tokens.
    pub tokens: u64,
}

/// Places granted to a request; give them back with [`Queue::release`].
#[derive(Debug, Clone)]
pub struct Grant {
    pub address: Arc<str>,
    pub key: Arc<str>,
    pub places: u64,
    /// The work this request holds while it runs.
    work: u64,
}

struct Waiter<T> {
    ticket: Ticket,
    places: u64,
    work: u64,
    seq: u64,
    payload: T,
}

/// Where a new request stands.
pub enum Arrival<T> {
    /// Places are free and nobody waiting comes first.
    Start(Grant),
    /// It waits under this id. `pushed_out` is a waiting request whose place it took.
    Wait { id: u64, pushed_out: Option<T> },
    /// Every waiting place is taken (the payload comes back).
    Full(T),
}

type Prio = (u64, u64, u64);
/// A key filed under an address: (work of the key, arrival, key).
type Head = (u64, u64, Arc<str>);

pub struct Queue<T> {
    cfg: AdmissionConfig,
    /// The places this queue may fill now: `cfg.places`, or this router's share of them
    /// when routers share a model's places ([`Queue::set_capacity`]).
    capacity: u64,
    /// Places held by running requests.
    held: u64,
    /// Places held per address.
    held_addr: HashMap<Arc<str>, u64>,
    work_addr: HashMap<Arc<str>, u64>,
    work_key: HashMap<Arc<str>, u64>,
    waiters: HashMap<u64, Waiter<T>>,
    /// Each key's waiting requests, oldest first.
    key_queue: HashMap<Arc<str>, VecDeque<u64>>,
    /// Per address, the keys whose oldest waiting request comes from it, ordered by
    /// (work of the key, arrival): the first is the address's candidate.
    heads_of: HashMap<Arc<str>, BTreeSet<Head>>,
    /// Where each key's head is filed: (address, work of the key, arrival).
    head_of_key: HashMap<Arc<str>, (Arc<str>, u64, u64)>,
    /// One entry per address with a candidate: `(max(address work, key work), key work,
    /// arrival)` of its candidate. The first entry goes next.
    index: BTreeSet<(Prio, Arc<str>)>,
    index_of: HashMap<Arc<str>, Prio>,
    /// Waiting places per address, and each address's waiting requests by id.
    waiting_addr: HashMap<Arc<str>, u64>,
    addr_waiters: HashMap<Arc<str>, BTreeSet<u64>>,
    /// Addresses with waiting requests by load (work + waiting places), for push-out.
    loads: BTreeSet<(u64, Arc<str>)>,
    load_of: HashMap<Arc<str>, u64>,
    /// Tokens admitted recently: (when, address, key, tokens).
    recent: VecDeque<(Millis, Arc<str>, Arc<str>, u64)>,
    next_seq: u64,
}

/// How many busier addresses a push-out looks at before it gives up.
const PUSH_OUT_TRIES: usize = 32;

impl<T> Queue<T> {
    pub fn new(cfg: AdmissionConfig) -> Queue<T> {
        Queue {
            capacity: cfg.places.max(1),
            held: 0,
            held_addr: HashMap::new(),
            cfg,
            work_addr: HashMap::new(),
            work_key: HashMap::new(),
            waiters: HashMap::new(),
            key_queue: HashMap::new(),
            heads_of: HashMap::new(),
            head_of_key: HashMap::new(),
            index: BTreeSet::new(),
            index_of: HashMap::new(),
            waiting_addr: HashMap::new(),
            addr_waiters: HashMap::new(),
            loads: BTreeSet::new(),
            load_of: HashMap::new(),
            recent: VecDeque::new(),
            next_seq: 0,
        }
    }

    pub fn config(&self) -> &AdmissionConfig {
        &self.cfg
    }

    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    pub fn free_places(&self) -> u64 {
        self.capacity.saturating_sub(self.held)
    }

    /// Change the places this queue may fill (requests running past a smaller capacity
    /// finish; no new one starts until they are under it), then start who now fits.
    pub fn set_capacity(&mut self, places: u64, now: Millis) -> Vec<(T, Grant)> {
        self.capacity = places;
        self.dispatch(now)
    }

    /// What each address asks of this queue: places held plus places waited for.
    pub fn demand(&self) -> HashMap<Arc<str>, u64> {
        let mut d = self.held_addr.clone();
        for (a, w) in &self.waiting_addr {
            *d.entry(a.clone()).or_insert(0) += w;
        }
        d.retain(|_, v| *v > 0);
        d
    }

    /// Places and work of a request of `tokens` estimated tokens.
    fn cost(&self, tokens: u64) -> (u64, u64) {
        match self.cfg.slot_tokens {
            Some(slot) if slot > 0 => {
                let places = tokens
                    .div_ceil(slot)
                    .clamp(1, self.cfg.slot_cost_max.max(1))
                    .min(self.cfg.places.max(1));
                (places, tokens.max(places * (slot / 4).max(1)))
            }
            _ => (1, 1),
        }
    }

    fn wa(&self, a: &Arc<str>) -> u64 {
        self.work_addr.get(a).copied().unwrap_or(0)
    }

    fn wk(&self, k: &Arc<str>) -> u64 {
        self.work_key.get(k).copied().unwrap_or(0)
    }

    fn prio(&self, address: &Arc<str>, key: &Arc<str>, seq: u64) -> Prio {
        let (wa, wk) = (self.wa(address), self.wk(key));
        (wa.max(wk), wk, seq)
    }

    /// Re-file an address in the index from its best candidate.
    fn refile_address(&mut self, a: &Arc<str>) {
        if let Some(p) = self.index_of.remove(a) {
            self.index.remove(&(p, a.clone()));
        }
        let best = self
            .heads_of
            .get(a)
            .and_then(|s| s.first())
            .map(|(wk, seq, _)| (*wk, *seq));
        if let Some((wk, seq)) = best {
            let p = (self.wa(a).max(wk), wk, seq);
            self.index.insert((p, a.clone()));
            self.index_of.insert(a.clone(), p);
        }
    }

    /// Re-file a key's oldest waiting request under its address.
    fn refile_key(&mut self, key: &Arc<str>) {
        if let Some((a, wk, seq)) = self.head_of_key.remove(key) {
            if let Some(set) = self.heads_of.get_mut(&a) {
                set.remove(&(wk, seq, key.clone()));
                if set.is_empty() {
                    self.heads_of.remove(&a);
                }
            }
            self.refile_address(&a);
        }
        let head = self
            .key_queue
            .get(key)
            .and_then(|q| q.front())
            .and_then(|id| self.waiters.get(id))
            .map(|w| (w.ticket.address.clone(), w.seq));
        if let Some((a, seq)) = head {
            let wk = self.wk(key);
            self.heads_of
                .entry(a.clone())
                .or_default()
                .insert((wk, seq, key.clone()));
            self.head_of_key.insert(key.clone(), (a.clone(), wk, seq));
            self.refile_address(&a);
        }
    }

    /// Re-file an address's load (work + waiting places) for push-out.
    fn refile_load(&mut self, a: &Arc<str>) {
        if let Some(l) = self.load_of.remove(a) {
            self.loads.remove(&(l, a.clone()));
        }
        if let Some(w) = self.waiting_addr.get(a) {
            let l = self.wa(a) + w;
            self.loads.insert((l, a.clone()));
            self.load_of.insert(a.clone(), l);
        }
    }

    fn add_work(&mut self, address: &Arc<str>, key: &Arc<str>, delta: i64) {
        for (map, k) in [(&mut self.work_addr, address), (&mut self.work_key, key)] {
            let e = map.entry(k.clone()).or_insert(0);
            *e = (*e as i64 + delta).max(0) as u64;
            if *e == 0 {
                map.remove(k);
            }
        }
        if self.head_of_key.contains_key(key) {
            self.refile_key(key);
        }
        self.refile_address(address);
        self.refile_load(address);
    }

    /// Forget recent work older than `recent_ms`.
    fn expire(&mut self, now: Millis) {
        let horizon = now - self.cfg.recent_ms as Millis;
        while self.recent.front().is_some_and(|r| r.0 <= horizon) {
            if let Some((_, a, k, t)) = self.recent.pop_front() {
                self.add_work(&a, &k, -(t as i64));
            }
        }
    }

    fn grant(&mut self, ticket: Ticket, places: u64, work: u64, now: Millis) -> Grant {
        self.held += places;
        *self.held_addr.entry(ticket.address.clone()).or_insert(0) += places;
        self.add_work(&ticket.address, &ticket.key, work as i64);
        if self.cfg.slot_tokens.is_some() {
            self.recent.push_back((
                now,
                ticket.address.clone(),
                ticket.key.clone(),
                ticket.tokens,
            ));
            self.add_work(&ticket.address, &ticket.key, ticket.tokens as i64);
        }
        Grant {
            address: ticket.address,
            key: ticket.key,
            places,
            work,
        }
    }

    /// Take a waiting request out of every structure.
    fn unlink(&mut self, id: u64) -> Option<Waiter<T>> {
        let w = self.waiters.remove(&id)?;
        let key = w.ticket.key.clone();
        let addr = w.ticket.address.clone();
        if let Some(q) = self.key_queue.get_mut(&key) {
            q.retain(|x| *x != id);
            if q.is_empty() {
                self.key_queue.remove(&key);
            }
        }
        if let Some(e) = self.waiting_addr.get_mut(&addr) {
            *e = e.saturating_sub(w.places);
            if *e == 0 {
                self.waiting_addr.remove(&addr);
            }
        }
        if let Some(ids) = self.addr_waiters.get_mut(&addr) {
            ids.remove(&id);
            if ids.is_empty() {
                self.addr_waiters.remove(&addr);
            }
        }
        self.refile_key(&key);
        self.refile_load(&addr);
        Some(w)
    }

    fn enqueue(&mut self, ticket: Ticket, places: u64, work: u64, payload: T) -> u64 {
        let id = self.next_seq;
        self.next_seq += 1;
        let key = ticket.key.clone();
        let addr = ticket.address.clone();
        let q = self.key_queue.entry(key.clone()).or_default();
        let head = q.is_empty();
        q.push_back(id);
        *self.waiting_addr.entry(addr.clone()).or_insert(0) += places;
        self.addr_waiters
            .entry(addr.clone())
            .or_default()
            .insert(id);
        self.waiters.insert(
            id,
            Waiter {
                ticket,
                places,
                work,
                seq: id,
                payload,
            },
        );
        if head {
            self.refile_key(&key);
        }
        self.refile_load(&addr);
        id
    }

    /// A new request: start it, queue it, or refuse it.
    pub fn arrive(&mut self, ticket: Ticket, payload: T, now: Millis) -> Arrival<T> {
        self.expire(now);
        let (places, work) = self.cost(ticket.tokens);
        let seq = self.next_seq;
        let own_queue = self.key_queue.contains_key(&ticket.key);
        let first = self.index.first().map(|(p, _)| *p);
        let mine = self.prio(&ticket.address, &ticket.key, seq);
        if !own_queue && places <= self.free_places() && first.is_none_or(|f| mine < f) {
            self.next_seq += 1;
            return Arrival::Start(self.grant(ticket, places, work, now));
        }
        if self.waiters.len() < self.cfg.waiting {
            let id = self.enqueue(ticket, places, work, payload);
            return Arrival::Wait {
                id,
                pushed_out: None,
            };
        }
        if !self.cfg.push_out {
            return Arrival::Full(payload);
        }
        // The busiest address (work held and waiting), if busier than the newcomer's
        // address or key counting the newcomer, loses its newest waiting request, if that
        // does not come before the newcomer; else the next busiest.
        let mine_load = (self.wa(&ticket.address)
            + self.waiting_addr.get(&ticket.address).copied().unwrap_or(0))
        .max(self.wk(&ticket.key))
            + places;
        let victim = self
            .loads
            .iter()
            .rev()
            .take(PUSH_OUT_TRIES)
            .take_while(|(l, _)| *l > mine_load)
            .find_map(|(_, a)| {
                let newest = *self.addr_waiters.get(a)?.last()?;
                let w = self.waiters.get(&newest)?;
                (self.prio(&w.ticket.address, &w.ticket.key, w.seq) >= mine).then_some(newest)
            });
        match victim.and_then(|v| self.unlink(v)) {
            Some(victim) => {
                let id = self.enqueue(ticket, places, work, payload);
                Arrival::Wait {
                    id,
                    pushed_out: Some(victim.payload),
                }
            }
            None => Arrival::Full(payload),
        }
    }

    /// Start waiting requests while the first in order fits in the free places.
    pub fn dispatch(&mut self, now: Millis) -> Vec<(T, Grant)> {
        self.expire(now);
        let mut out = Vec::new();
        while let Some((_, addr)) = self.index.first() {
            let id = self
                .heads_of
                .get(addr)
                .and_then(|s| s.first())
                .and_then(|(_, _, key)| self.key_queue.get(key))
                .and_then(|q| q.front().copied());
            let Some(id) = id else { break };
            let free = self.free_places();
            let fits = self.waiters.get(&id).is_some_and(|w| w.places <= free);
            if !fits {
                break;
            }
            let Some(w) = self.unlink(id) else { break };
            let g = self.grant(w.ticket, w.places, w.work, now);
            out.push((w.payload, g));
        }
        out
    }

    /// Give places back (the request ended), then start who is next.
    pub fn release(&mut self, g: &Grant, now: Millis) -> Vec<(T, Grant)> {
        self.held = self.held.saturating_sub(g.places);
        if let Some(h) = self.held_addr.get_mut(&g.address) {
            *h = h.saturating_sub(g.places);
            if *h == 0 {
                self.held_addr.remove(&g.address);
            }
        }
        self.add_work(&g.address, &g.key, -(g.work as i64));
        self.dispatch(now)
    }

    /// Withdraw a waiting request (its wait ended); `None` when it is no longer waiting.
    pub fn cancel(&mut self, id: u64) -> Option<T> {
        self.unlink(id).map(|w| w.payload)
    }
}

/// Why a request got no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every waiting place was taken.
    Full,
    /// A busier address's newcomer took its waiting place.
    PushedOut,
    /// No place within `max_wait_ms`.
    TimedOut,
}

type Slot = oneshot::Sender<Result<Grant, Refusal>>;

/// One model's queue behind a mutex, with async waits.
pub struct Gate {
    queue: Mutex<Queue<Slot>>,
    clock: Arc<dyn Clock>,
}

/// Held places; dropping it gives them back.
pub struct Permit {
    gate: Arc<Gate>,
    grant: Option<Grant>,
    pub waited: Duration,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(g) = self.grant.take() {
            self.gate.release(&g);
        }
    }
}

/// Withdraws a waiting request whose caller went away.
struct WaitGuard<'a> {
    gate: &'a Arc<Gate>,
    id: Option<u64>,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            if let Ok(mut q) = self.gate.queue.lock() {
                q.cancel(id);
            }
        }
    }
}

impl Gate {
    pub fn new(cfg: AdmissionConfig, clock: Arc<dyn Clock>) -> Arc<Gate> {
        Arc::new(Gate {
            queue: Mutex::new(Queue::new(cfg)),
            clock,
        })
    }

    pub fn config(&self) -> AdmissionConfig {
        self.queue
            .lock()
            .map(|q| q.config().clone())
            .unwrap_or_default()
    }

    /// What each address asks of this gate (places held and waited for).
    pub fn demand(&self) -> HashMap<Arc<str>, u64> {
        self.queue.lock().map(|q| q.demand()).unwrap_or_default()
    }

    /// Fill at most `places` from now on (this router's share of a model's places).
    pub fn set_capacity(&self, places: u64) {
        let started = match self.queue.lock() {
            Ok(mut q) => q.set_capacity(places, self.clock.now_ms()),
            Err(_) => return,
        };
        self.send_all(started);
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.queue.lock().map_or(0, |q| q.waiting())
    }

    fn send_all(&self, started: Vec<(Slot, Grant)>) {
        for (tx, g) in started {
            // A waiter that went away gives its places straight back.
            if let Err(Ok(g)) = tx.send(Ok(g)) {
                self.release(&g);
            }
        }
    }

    fn release(&self, g: &Grant) {
        let started = match self.queue.lock() {
            Ok(mut q) => q.release(g, self.clock.now_ms()),
            Err(_) => return,
        };
        self.send_all(started);
    }

    /// Wait for places, at most `max_wait_ms`.
    pub async fn acquire(self: &Arc<Self>, ticket: Ticket) -> Result<Permit, Refusal> {
        let (tx, mut rx) = oneshot::channel();
        let started = self.clock.now_ms();
        let (arrival, wait) = {
            let mut q = self.queue.lock().map_err(|_| Refusal::Full)?;
            let wait = q.config().max_wait_ms as Millis;
            (q.arrive(ticket, tx, started), wait)
        };
        let id = match arrival {
            Arrival::Start(g) => {
                return Ok(Permit {
                    gate: self.clone(),
                    grant: Some(g),
                    waited: Duration::ZERO,
                })
            }
            Arrival::Full(_) => return Err(Refusal::Full),
            Arrival::Wait { id, pushed_out } => {
                if let Some(v) = pushed_out {
                    let _ = v.send(Err(Refusal::PushedOut));
                }
                id
            }
        };
        let mut guard = WaitGuard {
            gate: self,
            id: Some(id),
        };
        let deadline = self.clock.sleep_until(started.saturating_add(wait));
        let waited = tokio::select! {
            r = &mut rx => Ok(r),
            () = deadline => Err(()),
        };
        let outcome = match waited {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Refusal::Full),
            Err(()) => {
                let still_waiting = self
                    .queue
                    .lock()
                    .map(|mut q| q.cancel(id).is_some())
                    .unwrap_or(true);
                if still_waiting {
                    Err(Refusal::TimedOut)
                } else {
                    // Granted as the wait ended: take it.
                    rx.try_recv().unwrap_or(Err(Refusal::TimedOut))
                }
            }
        };
        guard.id = None;
        outcome.map(|g| Permit {
            gate: self.clone(),
            grant: Some(g),
            waited: Duration::from_millis(self.clock.now_ms().saturating_sub(started).max(0) as u64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(a: &str, k: &str, tokens: u64) -> Ticket {
        Ticket {
            address: a.into(),
            key: k.into(),
            tokens,
        }
    }

    fn cfg(places: u64, waiting: usize) -> AdmissionConfig {
        AdmissionConfig {
            places,
            waiting,
            ..AdmissionConfig::default()
        }
    }

    #[test]
    fn starts_at_once_when_free_and_nobody_waits() {
        let mut q: Queue<u32> = Queue::new(cfg(2, 10));
        assert!(matches!(q.arrive(t("a", "k1", 1), 1, 0), Arrival::Start(_)));
        assert!(matches!(q.arrive(t("a", "k1", 1), 2, 0), Arrival::Start(_)));
        assert!(matches!(
            q.arrive(t("a", "k1", 1), 3, 0),
            Arrival::Wait { .. }
        ));
    }

    #[test]
    fn the_least_busy_address_goes_next() {
        let mut q: Queue<&str> = Queue::new(cfg(2, 10));
        let Arrival::Start(g1) = q.arrive(t("a", "ka", 1), "a1", 0) else {
            panic!()
        };
        let Arrival::Start(_g2) = q.arrive(t("a", "ka", 1), "a2", 0) else {
            panic!()
        };
        // a holds 2 places; a waits first, b later: b goes first.
        assert!(matches!(
            q.arrive(t("a", "ka", 1), "a3", 0),
            Arrival::Wait { .. }
        ));
        assert!(matches!(
            q.arrive(t("b", "kb", 1), "b1", 0),
            Arrival::Wait { .. }
        ));
        let next = q.release(&g1, 0);
        assert_eq!(next.iter().map(|x| x.0).collect::<Vec<_>>(), vec!["b1"]);
    }

    #[test]
    fn a_key_brings_its_work_between_addresses() {
        let mut q: Queue<&str> = Queue::new(cfg(4, 10));
        // Key k works from address a (2 places); b and d hold one each.
        let Arrival::Start(_) = q.arrive(t("a", "k", 1), "x", 0) else {
            panic!()
        };
        let Arrival::Start(_) = q.arrive(t("a", "k", 1), "y", 0) else {
            panic!()
        };
        let Arrival::Start(_) = q.arrive(t("b", "kb", 1), "z", 0) else {
            panic!()
        };
        let Arrival::Start(g) = q.arrive(t("d", "kd", 1), "w", 0) else {
            panic!()
        };
        // k now asks from address c, which holds nothing; then b asks again.
        q.arrive(t("c", "k", 1), "k-from-c", 0);
        q.arrive(t("b", "kb", 1), "b", 0);
        // k's 2 places count for it at c: b (1 place) goes first.
        let next = q.release(&g, 0);
        assert_eq!(next[0].0, "b");
    }

    #[test]
    fn a_keys_requests_start_in_order() {
        let mut q: Queue<u32> = Queue::new(cfg(1, 10));
        let Arrival::Start(g) = q.arrive(t("a", "k", 1), 0, 0) else {
            panic!()
        };
        for i in 1..=3 {
            q.arrive(t("a", "k", 1), i, 0);
        }
        let mut order = Vec::new();
        let mut g = g;
        for _ in 0..3 {
            let next = q.release(&g, 0);
            order.push(next[0].0);
            g = next[0].1.clone();
        }
        assert_eq!(order, vec![1, 2, 3]);
    }

    #[test]
    fn push_out_takes_the_busiest_addresss_newest() {
        let mut q: Queue<&str> = Queue::new(cfg(1, 3));
        let Arrival::Start(_) = q.arrive(t("a", "ka", 1), "run", 0) else {
            panic!()
        };
        q.arrive(t("a", "ka", 1), "a1", 0);
        q.arrive(t("a", "ka", 1), "a2", 0);
        q.arrive(t("b", "kb", 1), "b1", 0);
        // Full. A newcomer from c pushes out a's newest.
        match q.arrive(t("c", "kc", 1), "c1", 0) {
            Arrival::Wait { pushed_out, .. } => assert_eq!(pushed_out, Some("a2")),
            _ => panic!("c should get a place"),
        }
        // A newcomer from a itself gets nothing: a is the busiest.
        assert!(matches!(
            q.arrive(t("a", "ka", 1), "a3", 0),
            Arrival::Full("a3")
        ));
        // Without push_out, refused at once.
        let mut q: Queue<&str> = Queue::new(AdmissionConfig {
            push_out: false,
            ..cfg(1, 1)
        });
        q.arrive(t("a", "ka", 1), "run", 0);
        q.arrive(t("a", "ka", 1), "a1", 0);
        assert!(matches!(
            q.arrive(t("c", "kc", 1), "c1", 0),
            Arrival::Full("c1")
        ));
    }

    #[test]
    fn token_places_and_recent_work() {
        let c = AdmissionConfig {
            slot_tokens: Some(1_000),
            slot_cost_max: 3,
            ..cfg(4, 10)
        };
        let mut q: Queue<&str> = Queue::new(c);
        // 2,500 tokens take 3 places; 10,000 take at most 3.
        let Arrival::Start(g) = q.arrive(t("a", "ka", 2_500), "big", 0) else {
            panic!()
        };
        assert_eq!(g.places, 3);
        assert_eq!(q.free_places(), 1);
        // A 3-place request waits (1 free) even though nobody waits.
        assert!(matches!(
            q.arrive(t("b", "kb", 10_000), "b", 0),
            Arrival::Wait { .. }
        ));
        // After the big one ends, a's recent tokens still count until recent_ms passes.
        q.release(&g, 1);
        assert_eq!(q.work_addr.get("a").copied(), Some(2_500));
        q.dispatch(20_000);
        assert_eq!(q.work_addr.get("a").copied(), None);
    }

    /// A closed-loop simulation against a slow backend: every client keeps `outstanding`
    /// requests in the system, each served in `ms_per_token` × tokens (at least 100 ms in
    /// places mode). Returns the work each address (or key) got, counted in place-ms or in
    /// tokens, between `warm` and `end`.
    struct Client {
        address: &'static str,
        key: &'static str,
        outstanding: usize,
        tokens: u64,
    }

    fn simulate(
        cfg: AdmissionConfig,
        clients: &[Client],
        by_key: bool,
        tokens_mode: bool,
    ) -> HashMap<&'static str, f64> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let (warm, end) = (20_000i64, 220_000i64);
        let mut q: Queue<usize> = Queue::new(cfg);
        let mut running: BinaryHeap<Reverse<(i64, u64, usize)>> = BinaryHeap::new();
        let mut grants: HashMap<u64, Grant> = HashMap::new();
        let mut next = 0u64;
        let mut got: HashMap<&'static str, f64> = HashMap::new();
        // Service times vary (0.5× to 1.5×, a fixed pseudo-random sequence), so releases do
        // not come in lockstep waves.
        let duration = |c: &Client, n: u64| {
            let base = if tokens_mode {
                (c.tokens / 10) as i64
            } else {
                100
            };
            let jitter = (n
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407)
                >> 33)
                % 1000;
            (base * (500 + jitter as i64) / 1000).max(1)
        };
        let mut start = |g: Grant,
                         i: usize,
                         now: i64,
                         running: &mut BinaryHeap<Reverse<(i64, u64, usize)>>,
                         grants: &mut HashMap<u64, Grant>| {
            let c = &clients[i];
            let d = duration(c, next);
            let (a, b) = (now.max(warm), (now + d).min(end));
            if b > a {
                let share = (b - a) as f64 / d as f64;
                let amount = if tokens_mode {
                    c.tokens as f64
                } else {
                    g.places as f64 * d as f64
                };
                *got.entry(if by_key { c.key } else { c.address })
                    .or_default() += amount * share;
            }
            running.push(Reverse((now + d, next, i)));
            grants.insert(next, g);
            next += 1;
        };
        let ticket = |i: usize| Ticket {
            address: clients[i].address.into(),
            key: clients[i].key.into(),
            tokens: clients[i].tokens,
        };
        for (i, c) in clients.iter().enumerate() {
            for _ in 0..c.outstanding {
                if let Arrival::Start(g) = q.arrive(ticket(i), i, 0) {
                    start(g, i, 0, &mut running, &mut grants);
                }
            }
        }
        while let Some(Reverse((t, id, i))) = running.pop() {
            if t >= end {
                break;
            }
            let g = grants.remove(&id).unwrap();
            for (j, g2) in q.release(&g, t) {
                start(g2, j, t, &mut running, &mut grants);
            }
            match q.arrive(ticket(i), i, t) {
                Arrival::Start(g) => start(g, i, t, &mut running, &mut grants),
                Arrival::Wait { .. } => {}
                Arrival::Full(_) => panic!("the queue is large enough"),
            }
        }
        got
    }

    fn jain(xs: &[f64]) -> f64 {
        let s: f64 = xs.iter().sum();
        let s2: f64 = xs.iter().map(|x| x * x).sum();
        s * s / (xs.len() as f64 * s2)
    }

    fn assert_fair(got: &HashMap<&'static str, f64>, names: &[&'static str]) {
        let xs: Vec<f64> = names
            .iter()
            .map(|n| got.get(n).copied().unwrap_or(0.0))
            .collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        eprintln!(
            "shares {:?}, Jain {:.4}",
            names
                .iter()
                .zip(xs.iter().map(|x| (x / mean * 1000.0).round() / 1000.0))
                .collect::<Vec<_>>(),
            jain(&xs)
        );
        for (n, x) in names.iter().zip(&xs) {
            assert!(
                (x - mean).abs() <= 0.1 * mean,
                "{n}: {x} vs mean {mean}: {got:?}"
            );
        }
        assert!(jain(&xs) >= 0.99, "Jain {}: {got:?}", jain(&xs));
    }

    fn c(address: &'static str, key: &'static str, outstanding: usize, tokens: u64) -> Client {
        Client {
            address,
            key,
            outstanding,
            tokens,
        }
    }

    #[test]
    fn saturated_addresses_share_places_equally_whatever_they_send() {
        // More requests at once, or more keys on one address, buy no share.
        let clients = [
            c("a", "a1", 20, 1),
            c("b", "b1", 10, 1),
            c("b", "b2", 10, 1),
            c("b", "b3", 10, 1),
            c("c", "c1", 5, 1),
            c("d", "d1", 3, 1),
        ];
        let got = simulate(cfg(8, 256), &clients, false, false);
        assert_fair(&got, &["a", "b", "c", "d"]);
    }

    #[test]
    fn splitting_requests_buys_no_share_of_tokens() {
        // The same tokens in large, medium or small requests.
        let cfg = AdmissionConfig {
            slot_tokens: Some(1_000),
            slot_cost_max: 4,
            ..cfg(8, 256)
        };
        let clients = [
            c("big", "k1", 4, 4_000),
            c("mid", "k2", 8, 2_000),
            c("small", "k3", 16, 1_000),
            c("tiny", "k4", 40, 250),
        ];
        let got = simulate(cfg, &clients, false, true);
        assert_fair(&got, &["big", "mid", "small", "tiny"]);
    }

    #[test]
    fn a_key_on_several_addresses_gets_one_share() {
        // Key k sends from four addresses at once; each of those holds only part of k's
        // work, but k's work counts wherever it asks from.
        let clients = [
            c("x1", "k", 5, 1),
            c("x2", "k", 5, 1),
            c("x3", "k", 5, 1),
            c("x4", "k", 5, 1),
            c("y", "m", 20, 1),
            c("z", "n", 20, 1),
        ];
        let got = simulate(cfg(6, 256), &clients, true, false);
        assert_fair(&got, &["k", "m", "n"]);
    }
}
