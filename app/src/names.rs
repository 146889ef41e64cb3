//! Every name the operator derives from a tenant name, and the validation that keeps all of them legal.
//!
//! A tenant name is the root of a Kubernetes Secret, RunJob, Job and Pod name and of a ClickHouse
//! database and user. The limits here are chosen so the longest derived name still fits: a RunJob (and
//! its Job) is `<tenant>-<action>-<serial>` and must stay a 63-character DNS label.

use std::fmt;

/// Longest tenant name: 40 + "-provision-" (11) + a 12-digit serial = 63, the DNS label limit.
pub const MAX_TENANT_NAME: usize = 40;
/// Longest `spec.displayName`.
pub const MAX_DISPLAY_NAME: usize = 128;
/// Longest RunJob name: it is also the Job's name, which Kubernetes puts into a label value.
pub const MAX_RUN_JOB_NAME: usize = 63;
/// Largest serial that keeps a RunJob name within [`MAX_RUN_JOB_NAME`].
pub const MAX_RUN_SERIAL: u64 = 999_999_999_999;

/// The tenant-name rule as a regular expression, shared by the CRD schema and the dashboard form.
pub const TENANT_NAME_PATTERN: &str = "^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 label, the rule for RunJob names.
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Display names may hold any printable text but no control characters: C0, DEL and C1, exactly
/// what `char::is_control` refuses in [`validate_display_name`].
pub const DISPLAY_NAME_PATTERN: &str = "^[^\\x00-\\x1F\\x7F-\\x9F]*$";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("tenant name must not be empty")]
    Empty,
    #[error("tenant name {name:?} is {len} characters long; the limit is {MAX_TENANT_NAME}")]
    TooLong { name: String, len: usize },
    #[error(
        "tenant name {name:?} is invalid: use lowercase letters, digits and '-', start with a letter and end with a letter or digit"
    )]
    Invalid { name: String },
    #[error("display name is {len} characters long; the limit is {MAX_DISPLAY_NAME}")]
    DisplayNameTooLong { len: usize },
    #[error("display name must not contain control characters (newlines, tabs, escapes)")]
    DisplayNameControl,
}

/// A validated tenant name. Holding one proves every name derived from it is legal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantName(String);

impl TenantName {
    pub fn parse(name: &str) -> Result<Self, NameError> {
        validate_tenant_name(name)?;
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// ClickHouse database: `tenant_<name with '-' as '_'>`. Injective because tenant names have no '_'.
    pub fn database(&self) -> String {
        format!("tenant_{}", self.0.replace('-', "_"))
    }

    /// ClickHouse user that owns the tenant's database.
    pub fn clickhouse_user(&self) -> String {
        format!("{}_user", self.database())
    }

    /// The Secret that holds the tenant's real ClickHouse credentials.
    pub fn credentials_secret(&self) -> String {
        format!("{}-clickhouse", self.0)
    }

    /// A RunJob (and Job) name: deterministic, so a re-reconcile finds what an earlier one created.
    /// The serial is capped so the name stays a DNS label: at 12 digits, and at fewer when the tenant
    /// name and the action's word leave less room (`deprovision` after a 40-character name leaves 10).
    pub fn run_job(&self, action: &str, serial: u64) -> String {
        let prefix = format!("{}-{}-", self.0, action.to_ascii_lowercase());
        let room = MAX_RUN_JOB_NAME.saturating_sub(prefix.len()).min(19) as u32;
        let largest = 10u64.pow(room) - 1;
        let name = format!("{prefix}{}", serial.min(MAX_RUN_SERIAL).min(largest));
        debug_assert!(name.len() <= MAX_RUN_JOB_NAME, "{name}");
        name
    }
}

impl fmt::Display for TenantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `name` can be a RunJob's: a DNS label (what the CRD's rule admits, [`DNS_LABEL_PATTERN`]).
pub fn is_run_job_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let end = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    name.len() <= MAX_RUN_JOB_NAME
        && end(bytes.first())
        && end(bytes.last())
        && bytes.iter().all(inner)
}

pub fn validate_tenant_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_TENANT_NAME {
        return Err(NameError::TooLong {
            name: name.to_owned(),
            len: name.len(),
        });
    }
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let first_ok = bytes[0].is_ascii_lowercase();
    let last_ok = bytes[bytes.len() - 1] != b'-';
    if !(first_ok && last_ok && bytes.iter().all(allowed)) {
        return Err(NameError::Invalid {
            name: name.to_owned(),
        });
    }
    Ok(())
}

pub fn validate_display_name(display: &str) -> Result<(), NameError> {
    let len = display.chars().count();
    if len > MAX_DISPLAY_NAME {
        return Err(NameError::DisplayNameTooLong { len });
    }
    if display.chars().any(char::is_control) {
        return Err(NameError::DisplayNameControl);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_job_name_is_a_dns_label() {
        let longest = "a".repeat(63);
        for ok in ["acme-provision-1", "0-run", "a", longest.as_str()] {
            assert!(is_run_job_name(ok), "{ok}");
        }
        let too_long = "a".repeat(64);
        for bad in [
            "",
            "-a",
            "a-",
            "Acme",
            "a/status",
            "a b",
            "a.b",
            "a,b",
            too_long.as_str(),
        ] {
            assert!(!is_run_job_name(bad), "{bad}");
        }
    }

    #[test]
    fn accepts_dns_labels_that_start_with_a_letter() {
        for ok in [
            "a",
            "acme",
            "acme-corp",
            "a1",
            "x-9-y",
            &"a".repeat(MAX_TENANT_NAME),
        ] {
            assert_eq!(validate_tenant_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_names_that_would_break_a_derived_name() {
        for bad in [
            "", "1acme", "-acme", "acme-", "Acme", "ac_me", "ac.me", "acmé", "a b", "a;drop",
        ] {
            assert!(validate_tenant_name(bad).is_err(), "{bad:?} accepted");
        }
        let long = "a".repeat(MAX_TENANT_NAME + 1);
        assert!(matches!(
            validate_tenant_name(&long),
            Err(NameError::TooLong { len: 41, .. })
        ));
    }

    #[test]
    fn longest_name_keeps_every_derived_name_legal() {
        let t = TenantName::parse(&"z".repeat(MAX_TENANT_NAME)).unwrap();
        let run = t.run_job("Provision", u64::MAX);
        assert_eq!(run.len(), MAX_RUN_JOB_NAME);
        assert_eq!(
            t.run_job("Deprovision", u64::MAX),
            format!("{}-deprovision-9999999999", "z".repeat(MAX_TENANT_NAME))
        );
        assert!(t.credentials_secret().len() <= 253);
        // A Job's pods are named `<job>-<5 chars>`, within the 253-character object-name limit.
        assert!(run.len() + 6 <= 253);
        // ClickHouse identifiers have no hard length limit, but keep them readable.
        assert!(t.clickhouse_user().len() < 64);
    }

    #[test]
    fn derived_names_are_stable_and_distinct() {
        let t = TenantName::parse("acme-corp").unwrap();
        assert_eq!(t.database(), "tenant_acme_corp");
        assert_eq!(t.clickhouse_user(), "tenant_acme_corp_user");
        assert_eq!(t.credentials_secret(), "acme-corp-clickhouse");
        assert_eq!(t.run_job("Suspend", 7), "acme-corp-suspend-7");
    }

    /// Known answers for the longest name, written by hand from the rules, not by these functions:
    /// `python3 -c "n='a'+'b-'*19+'c'; d='tenant_'+n.replace('-','_'); print(n, d, d+'_user',
    /// n+'-clickhouse', n+'-provision-999999999999', len(n+'-provision-999999999999'))"`.
    #[test]
    fn the_longest_names_derived_names_are_known() {
        let t = TenantName::parse("ab-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-c").unwrap();
        assert_eq!(
            t.database(),
            "tenant_ab_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_c"
        );
        assert_eq!(
            t.clickhouse_user(),
            "tenant_ab_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_c_user"
        );
        assert_eq!(
            t.credentials_secret(),
            "ab-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-c-clickhouse"
        );
        let run = t.run_job("Provision", u64::MAX);
        assert_eq!(
            run,
            "ab-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-c-provision-999999999999"
        );
        assert_eq!(run.len(), 63);
    }

    #[test]
    fn display_names_reject_control_characters_and_overlength() {
        assert_eq!(validate_display_name("Acme Corp — <b>EU</b>"), Ok(()));
        assert_eq!(
            validate_display_name("line\nbreak"),
            Err(NameError::DisplayNameControl)
        );
        assert_eq!(
            validate_display_name(&"é".repeat(MAX_DISPLAY_NAME + 1)),
            Err(NameError::DisplayNameTooLong {
                len: MAX_DISPLAY_NAME + 1
            })
        );
        assert_eq!(validate_display_name(&"é".repeat(MAX_DISPLAY_NAME)), Ok(()));
    }
}
