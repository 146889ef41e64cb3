//! metav1.Condition handling shared by both resources.

use jiff::Timestamp;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::to_k8s_time;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value { Self::True } else { Self::False }
    }
}

/// Sets condition `type_` in place. `lastTransitionTime` moves only when the status flips, as the
/// metav1.Condition contract asks; reason, message and observedGeneration always follow the input.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = to_k8s_time(now);
                existing.status = status.to_owned();
            }
            existing.reason = reason.to_owned();
            existing.message = message.to_owned();
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation: generation,
            last_transition_time: to_k8s_time(now),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conds = Vec::new();
        set_condition(
            &mut conds,
            "Ready",
            false.into(),
            "Pending",
            "waiting",
            Some(1),
            at(100),
        );
        set_condition(
            &mut conds,
            "Ready",
            false.into(),
            "Provisioning",
            "running",
            Some(2),
            at(200),
        );
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time.0, at(100));
        assert_eq!(conds[0].reason, "Provisioning");
        assert_eq!(conds[0].observed_generation, Some(2));

        set_condition(
            &mut conds,
            "Ready",
            true.into(),
            "Active",
            "ok",
            Some(2),
            at(300),
        );
        assert_eq!(conds[0].status, "True");
        assert_eq!(conds[0].last_transition_time.0, at(300));
    }

    #[test]
    fn conditions_of_other_types_are_kept() {
        let mut conds = Vec::new();
        set_condition(&mut conds, "Ready", true.into(), "Active", "", None, at(1));
        set_condition(
            &mut conds,
            "Provisioned",
            true.into(),
            "DatabaseReady",
            "",
            None,
            at(1),
        );
        assert_eq!(
            conds.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["Ready", "Provisioned"]
        );
    }

    #[test]
    fn written_times_have_second_precision() {
        let t = Timestamp::from_millisecond(1_500).unwrap();
        assert_eq!(to_k8s_time(t).0, at(1));
    }
}
