//! The bounds of a tenant's `spec.limits`, shared by the CRD schema, the provisioner and the
//! dashboard's form, and the one unit parser they all use.

use serde::{Deserialize, Serialize};

/// A tenant's limits as the dashboard shows and edits them (the CRD's `TenantLimits`, without its
/// schema); each `None` is "no limit".
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Limits {
    pub max_memory_per_query: Option<String>,
    pub max_execution_seconds: Option<i64>,
    pub max_concurrent_queries: Option<i64>,
    pub queries_per_hour: Option<i64>,
}

impl Limits {
    /// One line: `4Gi memory per query, 60 s per query, …`, or "no limits".
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            self.max_memory_per_query
                .as_ref()
                .map(|m| format!("{m} memory per query")),
            self.max_execution_seconds
                .map(|s| format!("{s} s per query")),
            self.max_concurrent_queries
                .map(|n| format!("{n} concurrent queries")),
            self.queries_per_hour
                .map(|n| format!("{n} queries per hour")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if parts.is_empty() {
            "no limits".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// The four form fields (empty for no limit), each checked against its bound; the first error wins.
    pub fn from_form(
        memory_text: &str,
        seconds: &str,
        concurrent: &str,
        per_hour: &str,
    ) -> Result<Self, String> {
        Ok(Self {
            max_memory_per_query: memory(memory_text)?,
            max_execution_seconds: bounded(
                "max execution seconds",
                seconds,
                MAX_EXECUTION_SECONDS,
            )?,
            max_concurrent_queries: bounded(
                "max concurrent queries",
                concurrent,
                MAX_CONCURRENT_QUERIES,
            )?,
            queries_per_hour: bounded("queries per hour", per_hour, MAX_QUERIES_PER_HOUR)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// `maxMemoryPerQuery`: 1 to 9999 mebibytes or gibibytes (`512Mi`, `4Gi`).
pub const MEMORY_PATTERN: &str = "^[1-9][0-9]{0,3}(Mi|Gi)$";
/// `maxExecutionSeconds`: one second to one day.
pub const MAX_EXECUTION_SECONDS: i64 = 86_400;
/// `maxConcurrentQueries`.
pub const MAX_CONCURRENT_QUERIES: i64 = 1_000;
/// `queriesPerHour`.
pub const MAX_QUERIES_PER_HOUR: i64 = 100_000_000;

/// Bytes of a `maxMemoryPerQuery` value, `None` for anything [`MEMORY_PATTERN`] does not admit.
pub fn memory_bytes(text: &str) -> Option<u64> {
    let (digits, shift) = if let Some(d) = text.strip_suffix("Mi") {
        (d, 20)
    } else {
        (text.strip_suffix("Gi")?, 30)
    };
    let valid = (1..=4).contains(&digits.len())
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    let n: u64 = digits.parse().ok().filter(|_| valid)?;
    Some(n << shift)
}

/// An integer limit typed into a form: empty is "no limit", anything else must lie in `1..=max`.
pub fn bounded(field: &str, text: &str, max: i64) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<i64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{field} must be a whole number from 1 to {max}, or empty for no limit"
        )),
    }
}

/// A memory limit typed into a form: empty is "no limit".
pub fn memory(text: &str) -> Result<Option<String>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    memory_bytes(text).map(|_| Some(text.to_owned())).ok_or_else(|| {
        format!(
            "max memory per query {text:?} must be 1 to 9999 followed by Mi or Gi (512Mi, 4Gi), or empty for no limit"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_values_convert_to_bytes() {
        assert_eq!(memory_bytes("512Mi"), Some(536_870_912));
        assert_eq!(memory_bytes("4Gi"), Some(4_294_967_296));
        assert_eq!(memory_bytes("9999Gi"), Some(10_736_344_498_176));
        for bad in [
            "", "Gi", "0Mi", "01Gi", "10000Mi", "4G", "4gi", "-1Gi", "1.5Gi", " 4Gi",
        ] {
            assert_eq!(memory_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn limits_read_as_one_line_and_come_from_the_form_checked() {
        assert_eq!(Limits::default().describe(), "no limits");
        let all = Limits::from_form("4Gi", "60", " 5 ", "1000").unwrap();
        assert_eq!(
            all.describe(),
            "4Gi memory per query, 60 s per query, 5 concurrent queries, 1000 queries per hour"
        );
        assert!(Limits::from_form("", "", "", "").unwrap().is_empty());
        assert_eq!(
            Limits::from_form("", "86401", "", "").unwrap_err(),
            "max execution seconds must be a whole number from 1 to 86400, or empty for no limit"
        );
        assert!(
            Limits::from_form("4 GB", "", "", "")
                .unwrap_err()
                .contains("\"4 GB\"")
        );
    }

    #[test]
    fn form_values_are_empty_or_in_bounds() {
        assert_eq!(bounded("x", " ", 10), Ok(None));
        assert_eq!(bounded("x", "10", 10), Ok(Some(10)));
        for bad in ["0", "11", "-1", "1e3", "ten"] {
            assert!(
                bounded("max", bad, 10)
                    .unwrap_err()
                    .starts_with("max must be"),
                "{bad}"
            );
        }
        assert_eq!(memory(""), Ok(None));
        assert_eq!(memory("2Gi"), Ok(Some("2Gi".to_owned())));
        assert!(memory("2GB").is_err());
    }
}
