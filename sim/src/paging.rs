//! Paged lists: `limit` and `continue`, served from one snapshot, as kube-apiserver does.
//!
//! A list with a `limit` answers at most that many items and, when more match, a `continue`
//! token. The pages after the first come from the snapshot the first page was cut from, so a
//! client that follows the tokens sees one consistent list at the first page's
//! resourceVersion, whatever changed in between. The simulator keeps the rest of each open
//! snapshot; a bounded number stay open, and a token whose snapshot is gone (evicted, or older
//! than the watch history) is 410 Expired, after which a client starts a new list.

use std::collections::VecDeque;

use serde_json::Value;

use crate::error::ApiError;

/// At most this many snapshots stay open; the oldest goes first.
pub const OPEN_SNAPSHOTS: usize = 16;

/// What the client gets when a token's snapshot is gone (kube-apiserver's words).
const EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. \
                       You can start a new list without the continue parameter.";

/// One page of a list.
#[derive(Debug, PartialEq)]
pub struct Page {
    pub items: Vec<Value>,
    /// The snapshot's resourceVersion.
    pub rv: u64,
    /// The token for the next page, when there is one.
    pub next: Option<String>,
    /// How many items the pages after this one hold.
    pub remaining: usize,
}

struct Snapshot {
    id: u64,
    rv: u64,
    /// What was listed: resource, namespace and selectors. A token serves only the same list.
    scope: String,
    /// The items the pages so far have not sent, in order.
    rest: VecDeque<Value>,
}

/// The open snapshots of paged lists.
#[derive(Default)]
pub struct Pages {
    next_id: u64,
    open: VecDeque<Snapshot>,
}

/// The `limit` query parameter: absent or 0 means the whole list.
pub fn limit(raw: Option<&str>) -> Result<Option<usize>, ApiError> {
    match raw.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n > 0 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            Ok(0) => Ok(None),
            _ => Err(ApiError::bad_request(format!(
                "invalid limit {s:?}: must be a non-negative integer"
            ))),
        },
    }
}

impl Pages {
    /// The first page of `items` (listed at `rv`). Without a limit, or when everything fits,
    /// it is the whole list and nothing stays open.
    pub fn first(&mut self, scope: String, rv: u64, items: Vec<Value>, limit: Option<usize>) -> Page {
        let mut rest: VecDeque<Value> = items.into();
        let Some(n) = limit.filter(|n| *n < rest.len()) else {
            return Page {
                items: rest.into(),
                rv,
                next: None,
                remaining: 0,
            };
        };
        let items: Vec<Value> = rest.drain(..n).collect();
        let id = self.next_id;
        self.next_id += 1;
        let remaining = rest.len();
        self.open.push_back(Snapshot { id, rv, scope, rest });
        while self.open.len() > OPEN_SNAPSHOTS {
            self.open.pop_front();
        }
        Page {
            items,
            rv,
            next: Some(token_of(id, rv)),
            remaining,
        }
    }

    /// The page after `token`. `compacted` is the oldest resourceVersion the watch history
    /// still holds: a snapshot older than that is expired, as on a cluster whose storage has
    /// compacted it away.
    pub fn next(&mut self, scope: &str, token: &str, limit: Option<usize>, compacted: u64) -> Result<Page, ApiError> {
        let (id, rv) = parse(token)?;
        let Some(at) = self.open.iter().position(|s| s.id == id && s.rv == rv) else {
            return Err(ApiError::gone(EXPIRED));
        };
        if rv < compacted {
            self.open.remove(at);
            return Err(ApiError::gone(EXPIRED));
        }
        if self.open[at].scope != scope {
            return Err(ApiError::bad_request(
                "the continue token was issued for a different list (resource, namespace or selectors)",
            ));
        }
        let snap = &mut self.open[at];
        let n = limit.unwrap_or(usize::MAX).min(snap.rest.len());
        let items: Vec<Value> = snap.rest.drain(..n).collect();
        let remaining = snap.rest.len();
        let next = if remaining > 0 {
            Some(token_of(id, rv))
        } else {
            self.open.remove(at);
            None
        };
        Ok(Page {
            items,
            rv,
            next,
            remaining,
        })
    }

    /// Close every snapshot (the history was compacted: their tokens are now 410).
    pub fn clear(&mut self) {
        self.open.clear();
    }

    /// How many snapshots are open.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

fn token_of(id: u64, rv: u64) -> String {
    format!("{rv}-{id}")
}

fn parse(token: &str) -> Result<(u64, u64), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {:?}", truncate(token)));
    let (rv, id) = token.split_once('-').ok_or_else(bad)?;
    Ok((id.parse().map_err(|_| bad())?, rv.parse().map_err(|_| bad())?))
}

/// A bounded echo of what the client sent.
fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn items(n: usize) -> Vec<Value> {
        (0..n).map(|i| json!({"metadata": {"name": format!("o{i}")}})).collect()
    }

    fn names(p: &Page) -> Vec<String> {
        p.items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_list_with_a_limit_comes_in_pages_of_one_snapshot() {
        let mut pages = Pages::default();
        let first = pages.first("cm/default".into(), 1200, items(5), Some(2));
        assert_eq!(names(&first), ["o0", "o1"]);
        assert_eq!((first.rv, first.remaining), (1200, 3));
        let second = pages
            .next("cm/default", first.next.as_deref().unwrap(), Some(2), 1000)
            .unwrap();
        assert_eq!(names(&second), ["o2", "o3"]);
        assert_eq!((second.rv, second.remaining), (1200, 1));
        // A later page may ask for a different size; the last one carries no token and closes
        // the snapshot.
        let last = pages
            .next("cm/default", second.next.as_deref().unwrap(), Some(10), 1000)
            .unwrap();
        assert_eq!(names(&last), ["o4"]);
        assert_eq!((last.next, last.remaining), (None, 0));
        assert_eq!(pages.open(), 0);
    }

    #[test]
    fn a_list_without_a_limit_or_that_fits_is_one_page_and_keeps_nothing_open() {
        let mut pages = Pages::default();
        for limit in [None, Some(5), Some(500)] {
            let p = pages.first("cm/".into(), 1001, items(5), limit);
            assert_eq!((p.items.len(), p.next.clone(), p.remaining), (5, None, 0));
        }
        assert_eq!(pages.open(), 0);
    }

    #[test]
    fn a_token_older_than_the_watch_history_is_expired() {
        let mut pages = Pages::default();
        let first = pages.first("cm/".into(), 1100, items(3), Some(1));
        let e = pages
            .next("cm/", first.next.as_deref().unwrap(), Some(1), 1101)
            .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
        assert_eq!(pages.open(), 0);
    }

    #[test]
    fn the_open_snapshots_are_bounded_and_the_oldest_token_expires_first() {
        let mut pages = Pages::default();
        let tokens: Vec<String> = (0..=OPEN_SNAPSHOTS)
            .map(|_| pages.first("cm/".into(), 1000, items(3), Some(1)).next.unwrap())
            .collect();
        assert_eq!(pages.open(), OPEN_SNAPSHOTS);
        assert_eq!(pages.next("cm/", &tokens[0], None, 1000).unwrap_err().code, 410);
        let newest = pages.next("cm/", &tokens[OPEN_SNAPSHOTS], None, 1000).unwrap();
        assert_eq!(names(&newest), ["o1", "o2"]);
    }

    #[test]
    fn a_malformed_token_or_one_for_another_list_is_a_bad_request() {
        let mut pages = Pages::default();
        let first = pages.first("cm/a".into(), 1000, items(3), Some(1));
        for bad in ["", "x", "1-", "-1", "a-b", &"9".repeat(100)] {
            let e = pages.next("cm/a", bad, None, 1000).unwrap_err();
            assert_eq!(e.code, 400, "{bad}");
            assert!(e.message.len() < 200, "{}", e.message);
        }
        let token = first.next.unwrap();
        assert_eq!(pages.next("cm/b", &token, None, 1000).unwrap_err().code, 400);
        // The refused request left the snapshot open for the list it belongs to.
        assert_eq!(names(&pages.next("cm/a", &token, None, 1000).unwrap()), ["o1", "o2"]);
        // A well-formed token the simulator never gave is expired, as on a cluster.
        assert_eq!(pages.next("cm/a", "1000-77", None, 1000).unwrap_err().code, 410);
    }

    #[test]
    fn the_limit_parameter_is_a_non_negative_integer() {
        assert_eq!(limit(None).unwrap(), None);
        assert_eq!(limit(Some("")).unwrap(), None);
        assert_eq!(limit(Some("0")).unwrap(), None);
        assert_eq!(limit(Some("500")).unwrap(), Some(500));
        for bad in ["-1", "x", "1.5"] {
            assert_eq!(limit(Some(bad)).unwrap_err().code, 400, "{bad}");
        }
    }
}
