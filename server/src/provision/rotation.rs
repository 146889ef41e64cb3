//! Which passwords a rotation keeps. ClickHouse ≥ 24.11 holds several authentication methods per
//! user, each with its own `VALID UNTIL`; one `ALTER USER … IDENTIFIED WITH …` sets the whole list. A
//! rotation lists every password still valid — the one being replaced until now + the grace period,
//! and those earlier rotations left until their own expiry — and the new one, so a second rotation
//! within the grace of the first never cuts the first one's old password short. The earlier ones are
//! known only by their hash and expiry, kept in the credentials Secret (`retiringPasswords`).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// ClickHouse's `max_authentication_methods_per_user` default: a statement listing more is refused.
pub const MAX_AUTHENTICATION_METHODS: usize = 100;

/// A password ClickHouse still accepts until `valid_until`, by its SHA-256 (hex).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Retiring {
    pub sha256: String,
    pub valid_until: Timestamp,
}

/// What a Secret's `retiringPasswords` holds; anything unreadable counts as none (those passwords
/// then end with this rotation, as before the list existed).
pub fn parse(text: Option<&str>) -> Vec<Retiring> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

pub fn to_text(kept: &[Retiring]) -> String {
    serde_json::to_string(kept).expect("a list of strings and times serializes")
}

/// The passwords a rotation at `now` keeps beside the new one: those on file not expired yet, and the
/// one being replaced (`old_sha256`) until `until`; the new one never (it needs no expiry); one entry
/// per hash, with its latest expiry. If more than ClickHouse accepts, the ones expiring soonest go
/// first. Ordered by expiry.
pub fn kept(
    on_file: &[Retiring],
    old_sha256: &str,
    new_sha256: &str,
    now: Timestamp,
    until: Timestamp,
) -> Vec<Retiring> {
    let mut kept: Vec<Retiring> = Vec::new();
    let candidates = on_file.iter().cloned().chain([Retiring {
        sha256: old_sha256.to_owned(),
        valid_until: until,
    }]);
    for candidate in candidates {
        if candidate.valid_until <= now || candidate.sha256 == new_sha256 {
            continue;
        }
        match kept.iter_mut().find(|k| k.sha256 == candidate.sha256) {
            Some(k) => k.valid_until = k.valid_until.max(candidate.valid_until),
            None => kept.push(candidate),
        }
    }
    kept.sort_by_key(|k| k.valid_until);
    let room = MAX_AUTHENTICATION_METHODS - 1;
    if kept.len() > room {
        kept.drain(..kept.len() - room);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    fn retiring(sha: &str, until: &str) -> Retiring {
        Retiring {
            sha256: sha.into(),
            valid_until: at(until),
        }
    }

    #[test]
    fn a_second_rotation_within_the_first_ones_grace_keeps_both_old_passwords() {
        let first = kept(
            &[],
            "p0",
            "p1",
            at("2026-12-03T10:00:00Z"),
            at("2026-12-03T11:00:00Z"),
        );
        assert_eq!(first, [retiring("p0", "2026-12-03T11:00:00Z")]);
        let second = kept(
            &first,
            "p1",
            "p2",
            at("2026-12-03T10:30:00Z"),
            at("2026-12-03T11:30:00Z"),
        );
        assert_eq!(
            second,
            [
                retiring("p0", "2026-12-03T11:00:00Z"),
                retiring("p1", "2026-12-03T11:30:00Z"),
            ],
            "p0 keeps its own expiry; p1 gets the new grace"
        );
    }

    #[test]
    fn expired_ones_go_and_the_new_password_is_never_listed_as_retiring() {
        let on_file = [
            retiring("gone", "2026-12-03T09:59:59Z"),
            retiring("p2", "2026-12-03T12:00:00Z"),
        ];
        let now = at("2026-12-03T10:00:00Z");
        let kept = kept(&on_file, "p1", "p2", now, at("2026-12-03T11:00:00Z"));
        assert_eq!(kept, [retiring("p1", "2026-12-03T11:00:00Z")]);
    }

    #[test]
    fn a_repeated_rotation_lists_each_password_once_with_its_latest_expiry() {
        let on_file = [retiring("p1", "2026-12-03T10:30:00Z")];
        let kept = kept(
            &on_file,
            "p1",
            "p2",
            at("2026-12-03T10:00:00Z"),
            at("2026-12-03T11:00:00Z"),
        );
        assert_eq!(kept, [retiring("p1", "2026-12-03T11:00:00Z")]);
    }

    #[test]
    fn never_more_than_clickhouse_accepts_the_soonest_expiring_go_first() {
        let start = at("2026-12-03T10:00:00Z");
        let on_file: Vec<Retiring> = (0..120)
            .map(|i| Retiring {
                sha256: format!("h{i}"),
                valid_until: start + jiff::SignedDuration::from_secs(60 * (i + 1)),
            })
            .collect();
        let kept = kept(
            &on_file,
            "old",
            "new",
            start,
            start + jiff::SignedDuration::from_hours(5),
        );
        assert_eq!(kept.len(), 99, "99 kept + the new one = ClickHouse's 100");
        assert_eq!(
            kept[0].sha256, "h22",
            "of 121, the 22 expiring soonest (h0..h21) go"
        );
        assert_eq!(kept.last().unwrap().sha256, "old");
    }

    #[test]
    fn the_secret_text_round_trips_and_garbage_reads_as_none() {
        let list = [retiring("ab", "2026-12-03T11:00:00Z")];
        assert_eq!(
            to_text(&list),
            r#"[{"sha256":"ab","validUntil":"2026-12-03T11:00:00Z"}]"#
        );
        assert_eq!(parse(Some(&to_text(&list))), list);
        assert_eq!(parse(Some("not json")), []);
        assert_eq!(parse(None), []);
    }
}
