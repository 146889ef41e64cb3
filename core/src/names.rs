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
    #[error(
        "ClickHouse prefix {prefix:?} is invalid: use 1 to {MAX_CLICKHOUSE_PREFIX} lowercase letters and digits, starting with a letter (no '_': it separates the prefix from the tenant's name)"
    )]
    Prefix { prefix: String },
}

/// Longest `--clickhouse-prefix`.
pub const MAX_CLICKHOUSE_PREFIX: usize = 24;
/// The prefix of every tenant of an install made before prefixes existed: `tenant_<name>`. Those
/// tenants keep their names (the provisioner reads them back from the tenant's status or Secret); an
/// install that wants new tenants named the same way passes `--clickhouse-prefix tenant`.
pub const LEGACY_CLICKHOUSE_PREFIX: &str = "tenant";

/// What the ClickHouse names of one install's tenants start with: database `<prefix>_<tenant>`, user
/// `<prefix>_<tenant>_user`. It has no '_', so a name's prefix is everything before its first '_':
/// installs with different prefixes never derive the same name, whatever their tenants are called.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClickHousePrefix(String);

impl ClickHousePrefix {
    pub fn parse(prefix: &str) -> Result<Self, NameError> {
        let bytes = prefix.as_bytes();
        let ok = !bytes.is_empty()
            && bytes.len() <= MAX_CLICKHOUSE_PREFIX
            && bytes[0].is_ascii_lowercase()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        match ok {
            true => Ok(Self(prefix.to_owned())),
            false => Err(NameError::Prefix {
                prefix: prefix.to_owned(),
            }),
        }
    }

    /// The default of an install in `namespace`: `st` and the first 10 hex digits of the namespace's
    /// 64-bit FNV-1a hash. Two installs of one cluster live in two namespaces, so they get two
    /// prefixes (a clash needs two namespace names among 2^40 hashes); installs in different clusters
    /// sharing one ClickHouse pass `--clickhouse-prefix`. A hash, because a namespace name has '-',
    /// which cannot be mapped into a prefix without making two namespaces look alike.
    pub fn for_namespace(namespace: &str) -> Self {
        let hash = namespace.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Self(format!("st{:010x}", hash >> 24))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tenant's ClickHouse database: `<prefix>_<name with '-' as '_'>`.
    pub fn database(&self, tenant: &TenantName) -> String {
        format!("{}_{}", self.0, tenant.0.replace('-', "_"))
    }
}

impl fmt::Display for ClickHousePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The ClickHouse user that owns `database` (a tenant's, as [`ClickHousePrefix::database`] names it).
pub fn clickhouse_user(database: &str) -> String {
    format!("{database}_user")
}

/// A validated tenant name. Holding one proves every name derived from it is legal.
/// The keys of a tenant's credentials Secret that an application connects with — all a copy of it
/// in another namespace holds (CloudNativePG's application Secret is the model).
pub const CREDENTIAL_KEYS: [&str; 7] = [
    "database", "host", "password", "port", "uri", "url", "username",
];

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
        let longest_prefix = ClickHousePrefix::parse(&"p".repeat(MAX_CLICKHOUSE_PREFIX)).unwrap();
        assert!(clickhouse_user(&longest_prefix.database(&t)).len() < 80);
    }

    #[test]
    fn derived_names_are_stable_and_distinct() {
        let t = TenantName::parse("acme-corp").unwrap();
        let legacy = ClickHousePrefix::parse(LEGACY_CLICKHOUSE_PREFIX).unwrap();
        assert_eq!(legacy.database(&t), "tenant_acme_corp");
        assert_eq!(
            clickhouse_user(&legacy.database(&t)),
            "tenant_acme_corp_user"
        );
        assert_eq!(t.credentials_secret(), "acme-corp-clickhouse");
        assert_eq!(t.run_job("Suspend", 7), "acme-corp-suspend-7");
    }

    /// Known answers for the longest name, written by hand from the rules, not by these functions:
    /// `python3 -c "n='a'+'b-'*19+'c'; d='tenant_'+n.replace('-','_'); print(n, d, d+'_user',
    /// n+'-clickhouse', n+'-provision-999999999999', len(n+'-provision-999999999999'))"`.
    #[test]
    fn the_longest_names_derived_names_are_known() {
        let t = TenantName::parse("ab-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-b-c").unwrap();
        let database = ClickHousePrefix::parse("tenant").unwrap().database(&t);
        assert_eq!(database, "tenant_ab_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_b_c");
        assert_eq!(
            clickhouse_user(&database),
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

    /// Known answers from the published FNV-1a 64 test vectors (`""` → cbf29ce484222325, `"a"` →
    /// af63dc4c8601ec8c) and from `python3 -c "h=0xcbf29ce484222325
    /// for b in b'sentry-tenants': h=((h^b)*0x100000001b3)%2**64
    /// print('st%010x'%(h>>24))"`.
    #[test]
    fn the_default_prefix_is_the_namespaces_hash() {
        let of = |ns: &str| ClickHousePrefix::for_namespace(ns).as_str().to_owned();
        assert_eq!(of(""), "stcbf29ce484");
        assert_eq!(of("a"), "staf63dc4c86");
        assert_eq!(of("sentry-tenants"), "st4051f908cd");
        assert_eq!(of("other"), "st0a24ad61c2");
        assert_ne!(
            of("a-b"),
            of("ab"),
            "namespaces that differ only by '-' differ"
        );
        for ns in ["", "a", "sentry-tenants", &"n".repeat(63)] {
            assert_eq!(
                ClickHousePrefix::parse(&of(ns)),
                Ok(ClickHousePrefix::for_namespace(ns))
            );
        }
    }

    #[test]
    fn a_prefix_is_letters_and_digits_so_it_never_runs_into_a_tenant_name() {
        for ok in ["t", "tenant", "prod2", &"p".repeat(MAX_CLICKHOUSE_PREFIX)] {
            assert!(ClickHousePrefix::parse(ok).is_ok(), "{ok}");
        }
        let long = "p".repeat(MAX_CLICKHOUSE_PREFIX + 1);
        for bad in [
            "",
            "2prod",
            "Prod",
            "prod_eu",
            "prod-eu",
            "pröd",
            "a`b",
            long.as_str(),
        ] {
            assert!(
                matches!(ClickHousePrefix::parse(bad), Err(NameError::Prefix { .. })),
                "{bad:?} accepted"
            );
        }
        // `a` + tenant `b-c` and `ab` + tenant `c`: the '_' after the prefix keeps them apart.
        let name = |n: &str| TenantName::parse(n).unwrap();
        let a = ClickHousePrefix::parse("a").unwrap();
        let ab = ClickHousePrefix::parse("ab").unwrap();
        assert_eq!(a.database(&name("b-c")), "a_b_c");
        assert_eq!(ab.database(&name("c")), "ab_c");
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
