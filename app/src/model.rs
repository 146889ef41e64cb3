//! What the dashboard shows, as plain data: computed on the server from the caches, sent to the browser
//! as JSON. Nothing here is secret — a credentials Secret appears by *name* only.

use serde::{Deserialize, Serialize};

/// One tenant row.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TenantRow {
    pub name: String,
    pub display_name: Option<String>,
    pub phase: String,
    pub ready: bool,
    pub ready_reason: String,
    pub ready_message: String,
    pub database: Option<String>,
    pub secret_name: Option<String>,
    /// RFC 3339.
    pub created: Option<String>,
    pub suspended: bool,
    /// A Provision run exists that has not finished.
    pub provisioning: bool,
    /// `spec.reclaimPolicy`: "Retain" or "Delete", what deleting the tenant does in ClickHouse.
    pub reclaim_policy: String,
}

/// What the tenant's own page shows beyond its row. Not in [`TenantRow`]: a list builds, keys and
/// compares fifty rows per render, and none of this is on them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TenantFacts {
    /// ClickHouse logins as the `AccessLocked` condition says: "locked", "allowed", "locking…",
    /// "unlocking…", "lock failed", "unlock failed"; "—" before provisioning.
    pub logins: String,
    /// `spec.provisioning`: "Automatic" (the operator starts Provision runs) or "Manual".
    pub provisioning_policy: String,
    /// `spec.limits`.
    pub limits: crate::limits::Limits,
    /// Where the limits stand, from the `LimitsEnforced` condition: "enforced", "applying…", "apply
    /// failed"; "—" before provisioning.
    pub limits_state: String,
    /// Which spec ClickHouse reflects: "generation 4 (current)", "generation 3; applying 4", "—".
    pub clickhouse_generation: String,
    /// The credentials' latest rotation: "never rotated", "rotating…", or the Rotate run's outcome.
    pub credentials: String,
    /// While the tenant is Terminating: what its reclaim policy is doing (the `Reclaimed` condition).
    pub deletion: Option<String>,
}

impl TenantRow {
    /// Provision makes sense when no database was reported and no Provision run is in flight.
    pub fn can_provision(&self) -> bool {
        self.database.is_none() && !self.provisioning && !self.suspended
    }
    /// After a failed Provision run the same button starts the next attempt.
    pub fn provision_label(&self) -> &'static str {
        if self.phase == "Failed" {
            "Retry"
        } else {
            "Provision"
        }
    }
    /// A new password needs credentials to replace: only once provisioned.
    pub fn can_rotate(&self) -> bool {
        self.database.is_some()
    }
    /// Deleting is always possible, once: not again while it is Terminating.
    pub fn can_delete(&self) -> bool {
        self.phase != "Terminating"
    }
    /// What deleting this tenant does, in the words of its reclaim policy.
    pub fn delete_consequence(&self) -> String {
        let name = &self.name;
        if self.reclaim_policy == "Delete" {
            "reclaimPolicy Delete: its ClickHouse database with all its data, its user and its credentials Secret are dropped. This cannot be undone.".to_owned()
        } else {
            format!(
                "reclaimPolicy Retain: its ClickHouse logins are locked; its database, user and credentials Secret are kept, and a new tenant named {name} takes them over."
            )
        }
    }
    pub fn can_suspend(&self) -> bool {
        !self.suspended
    }
    pub fn can_resume(&self) -> bool {
        self.suspended
    }
    /// Limits can change while the tenant lives; once it is being deleted they no longer matter.
    pub fn can_change_limits(&self) -> bool {
        self.phase != "Terminating"
    }
}

/// One run job row.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RunRow {
    pub name: String,
    pub tenant: String,
    pub action: String,
    /// `Pending`, `Running`, `Succeeded`, `Failed`, or `Pending` before the controller saw it.
    pub phase: String,
    pub job: Option<String>,
    pub started: Option<String>,
    pub finished: Option<String>,
    /// When the run and its Job are deleted.
    pub cleanup_at: Option<String>,
    pub message: String,
}

impl RunRow {
    pub fn is_finished(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ConditionView {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HistoryView {
    pub name: String,
    pub action: String,
    pub phase: String,
    pub message: String,
    /// RFC 3339, when known.
    pub started: Option<String>,
    pub finished: String,
    pub log_tail: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct EventView {
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub time: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TenantDetail {
    pub tenant: TenantRow,
    pub facts: TenantFacts,
    /// Copies of the credentials in other namespaces: where, and how each stands — never a value.
    pub copies: Vec<CopyView>,
    pub conditions: Vec<ConditionView>,
    pub runs: Vec<RunRow>,
    pub history: Vec<HistoryView>,
    pub events: Vec<EventView>,
}

/// One copy of a tenant's credentials, as the dashboard shows it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct CopyView {
    pub namespace: String,
    pub secret_name: String,
    /// "up to date", "waiting for consent", "conflict", "failed", "writing…", "not written yet",
    /// "being deleted".
    pub state: String,
    /// The provisioner's last word on it (empty when all is well).
    pub message: String,
}

impl CopyView {
    /// How an application's owner reads one key of the copy (the value never passes through the
    /// dashboard).
    pub fn read_command(&self, key: &str) -> String {
        format!(
            "kubectl -n {} get secret {} -o jsonpath='{{.data.{key}}}' | base64 -d",
            self.namespace, self.secret_name
        )
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RunDetail {
    pub run: RunRow,
    pub job_status: Option<String>,
    pub log_tail: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PhaseCount {
    pub phase: String,
    pub count: usize,
}

/// Runs that finished in one hour, by outcome.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct HourBucket {
    /// RFC 3339, the hour's first second.
    pub start: String,
    pub succeeded: usize,
    pub failed: usize,
}

/// How long one action's runs took.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ActionDurations {
    pub action: String,
    pub runs: usize,
    pub median_seconds: i64,
    pub p95_seconds: i64,
}

/// Something on the overview's "needs attention" list.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Attention {
    pub tenant: String,
    /// A few words: "Provisioning failed", "Terminating for 14 min".
    pub what: String,
    pub detail: String,
    /// The tenant's or the run's page.
    pub href: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Overview {
    pub tenants_by_phase: Vec<PhaseCount>,
    pub tenants_total: usize,
    pub runs_in_flight: usize,
    pub finished_last_24h: usize,
    pub cleaned_up_last_24h: usize,
    pub version: String,
    /// The last 24 hours, oldest first.
    pub runs_per_hour: Vec<HourBucket>,
    pub durations: Vec<ActionDurations>,
    /// The first entries, most urgent first; `attention_total` counts them all.
    pub attention: Vec<Attention>,
    pub attention_total: usize,
}

/// What every page needs to know about the session: the server's clock (countdowns are computed against
/// it, not the browser's), which actions the account behind the dashboard may take, and whose it is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub server_now: String,
    pub may: Allowed,
    pub namespace: String,
    /// The person the dashboard acts as (`dashboard --local`); none for the operator's dashboard, which
    /// acts as the operator's ServiceAccount.
    pub acting_as: Option<String>,
}

impl Meta {
    /// No action at all: no button is shown.
    pub fn read_only(&self) -> bool {
        !self.may.any()
    }
}

/// The actions the account behind the dashboard may take, by the permission each needs: a button it
/// may not use is not shown (the API server still decides every request).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Allowed {
    /// Create: `create tenants`.
    pub create: bool,
    /// Provision and Rotate: `create runjobs`.
    pub start_runs: bool,
    /// Suspend, Resume and Change limits: `patch tenants`.
    pub change: bool,
    /// Delete: `delete tenants`.
    pub delete: bool,
}

impl Allowed {
    pub const ALL: Self = Self {
        create: true,
        start_runs: true,
        change: true,
        delete: true,
    };
    pub const NONE: Self = Self {
        create: false,
        start_runs: false,
        change: false,
        delete: false,
    };

    pub fn any(&self) -> bool {
        *self != Self::NONE
    }
}

/// Rows per page of the tenants and runs lists: a page stays small at 10,000 tenants (the whole list
/// would be megabytes of HTML plus its hydration data).
pub const PAGE_SIZE: usize = 50;

/// One page of a list, with what the pager needs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub rows: Vec<T>,
    /// Rows before any filter.
    pub total: usize,
    /// Rows the filter kept, on all pages.
    pub matched: usize,
    /// 1-based; a page past the end shows the last one.
    pub page: usize,
    pub pages: usize,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            rows: self.rows.into_iter().map(f).collect(),
            total: self.total,
            matched: self.matched,
            page: self.page,
            pages: self.pages,
        }
    }
}

/// Which rows of `matched` ones page `page` (1-based, clamped to the pages there are) shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageWindow {
    pub page: usize,
    pub pages: usize,
    /// How many rows come before the page's first.
    pub skip: usize,
}

impl PageWindow {
    pub fn of(matched: usize, page: Option<usize>) -> Self {
        let pages = matched.div_ceil(PAGE_SIZE).max(1);
        let page = page.unwrap_or(1).clamp(1, pages);
        Self {
            page,
            pages,
            skip: (page - 1) * PAGE_SIZE,
        }
    }

    /// The page of `rows`, already cut out of `matched` ones by this window.
    pub fn page<T>(self, rows: Vec<T>, matched: usize, total: usize) -> Page<T> {
        Page {
            rows,
            total,
            matched,
            page: self.page,
            pages: self.pages,
        }
    }
}

/// Phases in display order, for filters and the overview.
pub const TENANT_PHASES: [&str; 6] = [
    "Active",
    "Provisioning",
    "Pending",
    "Suspended",
    "Failed",
    "Terminating",
];

/// CSS class of a phase badge. The badge always carries the phase as text too: colour is never the only
/// signal.
pub fn phase_class(phase: &str) -> &'static str {
    match phase {
        "Active" | "Succeeded" => "badge ok",
        "Provisioning" | "Running" | "Terminating" => "badge busy",
        "Pending" => "badge idle",
        "Suspended" => "badge paused",
        "Failed" => "badge bad",
        _ => "badge idle",
    }
}

/// Seconds between two RFC 3339 timestamps (`to - from`), if both parse.
pub fn seconds_between(from: &str, to: &str) -> Option<i64> {
    let a: jiff::Timestamp = from.parse().ok()?;
    let b: jiff::Timestamp = to.parse().ok()?;
    Some(b.as_second() - a.as_second())
}

/// "3d 4h", "5m 02s", "12s": short and stable.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m, sec) = (s / 86_400, (s % 86_400) / 3600, (s % 3600) / 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m:02}m")
    } else if m > 0 {
        format!("{m}m {sec:02}s")
    } else {
        format!("{sec}s")
    }
}

/// Age of something created at `created`, as of `now`.
pub fn age(created: Option<&str>, now: &str) -> String {
    age_at(created, now.parse().ok())
}

/// [`age`] with `now` already read: a list reads it once for all of its rows.
pub fn age_at(created: Option<&str>, now: Option<jiff::Timestamp>) -> String {
    let created = created.and_then(|c| c.parse::<jiff::Timestamp>().ok());
    match (created, now) {
        (Some(created), Some(now)) => human_duration(now.as_second() - created.as_second()),
        _ => "—".to_owned(),
    }
}

/// The cleanup countdown of a finished run: "in 4m 12s", or "now" once due.
pub fn countdown(cleanup_at: Option<&str>, now: &str) -> Option<String> {
    let left = seconds_between(now, cleanup_at?)?;
    Some(if left <= 0 {
        "now".to_owned()
    } else {
        format!("in {}", human_duration(left))
    })
}

/// `server_now` plus `seconds`: the time a page rendered at `server_now` shows `seconds` later.
pub fn now_from(server_now: &str, seconds: i64) -> String {
    match server_now.parse::<jiff::Timestamp>() {
        Ok(t) => (t + jiff::SignedDuration::from_secs(seconds.max(0))).to_string(),
        Err(_) => server_now.to_owned(),
    }
}

/// What a clock shows as of `now`: an `age` since `from`, the `duration` from `from` to `to` (or to
/// now while it runs), a `countdown` to `to`. The server renders it, and the browser again every second.
pub fn clock_text(
    kind: Option<&str>,
    from: Option<String>,
    to: Option<String>,
    now: &str,
) -> Option<String> {
    Some(match kind? {
        "age" => age(from.as_deref(), now),
        "duration" => from
            .and_then(|s| seconds_between(&s, to.as_deref().unwrap_or(now)))
            .map(human_duration)
            .unwrap_or_else(|| "—".into()),
        "countdown" => countdown(to.as_deref(), now).unwrap_or_else(|| "—".into()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window of a page (1-based) among `matched` rows: which to skip, clamped to the pages there are.
    #[test]
    fn pages_are_cut_and_clamped() {
        let matched = 2 * PAGE_SIZE + 3;
        let window = |page| {
            let w = PageWindow::of(matched, page);
            (w.page, w.pages, w.skip)
        };
        assert_eq!(window(None), (1, 3, 0));
        assert_eq!(window(Some(3)), (3, 3, 2 * PAGE_SIZE));
        assert_eq!(
            window(Some(99)),
            (3, 3, 2 * PAGE_SIZE),
            "past the end: the last"
        );
        assert_eq!(window(Some(0)), (1, 3, 0));
        let empty = PageWindow::of(0, Some(4));
        assert_eq!((empty.page, empty.pages, empty.skip), (1, 1, 0));
        let page = PageWindow::of(matched, Some(2)).page(vec!["row"], matched, 500);
        assert_eq!(
            (page.page, page.pages, page.matched, page.total, page.rows),
            (2, 3, matched, 500, vec!["row"])
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(0), "0s");
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(61), "1m 01s");
        assert_eq!(human_duration(3 * 3600 + 5 * 60), "3h 05m");
        assert_eq!(human_duration(2 * 86_400 + 3600), "2d 1h");
        assert_eq!(human_duration(-5), "0s");
    }

    #[test]
    fn clocks_count_on_from_the_time_the_page_was_rendered() {
        let rendered = "2026-11-30T12:00:00Z";
        assert_eq!(now_from(rendered, 75), "2026-11-30T12:01:15Z");
        assert_eq!(now_from("not a time", 75), "not a time");
        let now = now_from(rendered, 12);
        let at = |s: &str| Some(s.to_owned());
        assert_eq!(
            clock_text(Some("age"), at("2026-11-30T11:58:00Z"), None, &now).as_deref(),
            Some("2m 12s")
        );
        // A run still going lasts until now; a finished one until it finished.
        assert_eq!(
            clock_text(Some("duration"), at("2026-11-30T11:59:00Z"), None, &now).as_deref(),
            Some("1m 12s")
        );
        let finished = at("2026-11-30T11:59:30Z");
        assert_eq!(
            clock_text(Some("duration"), at("2026-11-30T11:59:00Z"), finished, &now).as_deref(),
            Some("30s")
        );
        assert_eq!(
            clock_text(Some("countdown"), None, at("2026-11-30T12:00:20Z"), &now).as_deref(),
            Some("in 8s")
        );
        assert_eq!(
            clock_text(Some("countdown"), None, None, &now).as_deref(),
            Some("—")
        );
        assert_eq!(clock_text(Some("sundial"), None, None, &now), None);
    }

    #[test]
    fn countdowns_reach_now_and_stay_there() {
        let now = "2026-11-30T12:00:00Z";
        assert_eq!(
            countdown(Some("2026-11-30T12:04:12Z"), now).as_deref(),
            Some("in 4m 12s")
        );
        assert_eq!(
            countdown(Some("2026-11-30T12:00:00Z"), now).as_deref(),
            Some("now")
        );
        assert_eq!(
            countdown(Some("2026-11-30T11:00:00Z"), now).as_deref(),
            Some("now")
        );
        assert_eq!(countdown(None, now), None);
        assert_eq!(age(Some("2026-11-29T12:00:00Z"), now), "1d 0h");
    }

    #[test]
    fn actions_follow_the_tenants_state() {
        let row = TenantRow {
            name: "acme".into(),
            display_name: None,
            phase: "Pending".into(),
            ready: false,
            ready_reason: "Pending".into(),
            ready_message: String::new(),
            database: None,
            secret_name: None,
            created: None,
            suspended: false,
            provisioning: false,
            reclaim_policy: "Retain".into(),
        };
        assert!(row.can_provision() && row.can_suspend() && !row.can_resume());
        assert_eq!(row.provision_label(), "Provision");
        let failed = TenantRow {
            phase: "Failed".into(),
            ..row.clone()
        };
        assert!(failed.can_provision());
        assert_eq!(failed.provision_label(), "Retry");
        let in_flight = TenantRow {
            provisioning: true,
            ..row.clone()
        };
        assert!(
            !in_flight.can_provision(),
            "a second click while one is in flight does nothing"
        );
        let active = TenantRow {
            database: Some("tenant_acme".into()),
            ..row.clone()
        };
        assert!(!active.can_provision() && active.can_rotate());
        assert!(!row.can_rotate(), "nothing to rotate before provisioning");
        let suspended = TenantRow {
            suspended: true,
            ..row
        };
        assert!(!suspended.can_suspend() && suspended.can_resume() && !suspended.can_provision());
    }

    #[test]
    fn each_phase_has_the_badge_of_its_meaning() {
        let pinned = [
            ("Active", "badge ok"),
            ("Provisioning", "badge busy"),
            ("Pending", "badge idle"),
            ("Suspended", "badge paused"),
            ("Failed", "badge bad"),
            ("Terminating", "badge busy"),
            ("Running", "badge busy"),
            ("Succeeded", "badge ok"),
        ];
        for phase in TENANT_PHASES {
            assert!(
                pinned.iter().any(|(p, _)| *p == phase),
                "{phase} is shown but has no pinned badge here"
            );
        }
        for (phase, class) in pinned {
            assert_eq!(phase_class(phase), class, "{phase}");
        }
        assert_eq!(
            phase_class("Unknown"),
            "badge idle",
            "anything else looks idle"
        );
    }
}
