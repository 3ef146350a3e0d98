//! A model's places shared by every router on one PostgreSQL database, so that admission is
//! fair over all of them and not only within each: an address that reaches the model through
//! one router gets the same share as one that reaches it through another.
//!
//! Several times a second each router writes what its queue of a model is asked for (places
//! held and waited for, per address) and reads every router's. The model's `places` are
//! divided max-min fairly among the addresses by their demand over all routers; each router
//! then fills the part that its own requests of those addresses ask for. Within a router the
//! queue orders requests as before. A router that stops refreshing is left out after two
//! seconds (its places go to the others); when the database cannot be read, each router falls
//! back to the model's whole `places`.

use std::collections::{BTreeMap, HashMap};

/// How often demand is exchanged.
pub const TICK_MS: i64 = 200;
/// A router's demand older than this is ignored.
pub const STALE_MS: i64 = 2_000;

/// The places router `me` may fill, out of `places`, given every router's demand (address →
/// places held and waited for). With no demand anywhere, every router may fill them all.
pub fn share(places: u64, demands: &BTreeMap<String, HashMap<String, u64>>, me: &str) -> u64 {
    let mut total: HashMap<&str, u64> = HashMap::new();
    for d in demands.values() {
        for (a, n) in d {
            *total.entry(a.as_str()).or_insert(0) += n;
        }
    }
    total.retain(|_, n| *n > 0);
    if total.is_empty() {
        return places;
    }
    // Max-min fair shares of the addresses: the least demanding first, each at most its
    // demand, the rest split evenly.
    let mut order: Vec<(&str, u64)> = total.iter().map(|(a, n)| (*a, *n)).collect();
    order.sort_by(|x, y| x.1.cmp(&y.1).then(x.0.cmp(y.0)));
    let mut left = places as f64;
    let mut alloc: HashMap<&str, f64> = HashMap::new();
    for (i, (a, n)) in order.iter().enumerate() {
        let even = left / (order.len() - i) as f64;
        let give = (*n as f64).min(even);
        alloc.insert(a, give);
        left -= give;
    }
    // Each router's part: its share of each address's allocation, by its part of the demand.
    let raw: Vec<(&String, f64)> = demands
        .iter()
        .map(|(r, d)| {
            let part = d
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(a, n)| {
                    let t = total.get(a.as_str()).copied().unwrap_or(1).max(1);
                    alloc.get(a.as_str()).copied().unwrap_or(0.0) * *n as f64 / t as f64
                })
                .sum();
            (r, part)
        })
        .collect();
    // Whole places, largest remainders first (the same answer on every router).
    let sum: f64 = raw.iter().map(|(_, p)| p).sum();
    let whole = (sum + 1e-9).floor() as u64;
    let mut floors: Vec<(&String, u64, f64)> = raw
        .iter()
        .map(|(r, p)| (*r, p.floor() as u64, p - p.floor()))
        .collect();
    let mut extra = whole.saturating_sub(floors.iter().map(|f| f.1).sum());
    let mut by_remainder: Vec<usize> = (0..floors.len()).collect();
    by_remainder.sort_by(|&i, &j| {
        floors[j]
            .2
            .partial_cmp(&floors[i].2)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(floors[i].0.cmp(floors[j].0))
    });
    for i in by_remainder {
        if extra == 0 {
            break;
        }
        if floors[i].2 > 0.0 {
            floors[i].1 += 1;
            extra -= 1;
        }
    }
    floors.iter().find(|f| f.0 == me).map_or(0, |f| f.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(entries: &[(&str, &[(&str, u64)])]) -> BTreeMap<String, HashMap<String, u64>> {
        entries
            .iter()
            .map(|(r, a)| {
                (
                    r.to_string(),
                    a.iter().map(|(x, n)| (x.to_string(), *n)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn addresses_get_even_shares_whichever_router_they_reach() {
        // One address on router r1, three on r2, all backlogged: 4 places, one each.
        let ds = d(&[("r1", &[("a", 6)]), ("r2", &[("b", 6), ("c", 6), ("d", 6)])]);
        assert_eq!(share(4, &ds, "r1"), 1);
        assert_eq!(share(4, &ds, "r2"), 3);
    }

    #[test]
    fn light_demand_is_met_and_the_rest_split() {
        // a asks one place; b and c want many: 8 places → a 1, b and c 3.5 each.
        let ds = d(&[("r1", &[("a", 1), ("b", 20)]), ("r2", &[("c", 20)])]);
        let (one, two) = (share(8, &ds, "r1"), share(8, &ds, "r2"));
        assert_eq!(one + two, 8);
        assert!((4..=5).contains(&one), "{one}");
    }

    #[test]
    fn an_address_on_both_routers_is_split_by_where_it_waits() {
        let ds = d(&[("r1", &[("a", 3)]), ("r2", &[("a", 1)])]);
        assert_eq!(share(4, &ds, "r1"), 3);
        assert_eq!(share(4, &ds, "r2"), 1);
    }

    #[test]
    fn no_demand_leaves_every_place_to_each() {
        let ds = d(&[("r1", &[]), ("r2", &[])]);
        assert_eq!(share(4, &ds, "r1"), 4);
        assert_eq!(share(4, &ds, "r3"), 4);
        // Demand elsewhere only: none here.
        let ds = d(&[("r1", &[]), ("r2", &[("a", 9)])]);
        assert_eq!(share(4, &ds, "r1"), 0);
        assert_eq!(share(4, &ds, "r2"), 4);
    }
}
