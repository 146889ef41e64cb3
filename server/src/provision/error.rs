//! Every way a provisioning run can fail, each as one actionable line: it becomes the RunJob's message.

use super::clickhouse::{ChError, codes};
use super::sql::MIN_VERSION;
use crate::names::NameError;

#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error(transparent)]
    InvalidName(#[from] NameError),
    #[error(transparent)]
    InvalidFlag(#[from] crate::flags::ValueError),
    #[error(
        "ClickHouse at {url} is unreachable: {detail} (check --clickhouse-url and that the server is running)"
    )]
    Unreachable { url: String, detail: String },
    #[error(
        "ClickHouse rejected the admin credentials ({message}): check the username and password in the admin Secret"
    )]
    AuthFailed { message: String },
    #[error(
        "ClickHouse {version} is too old: it has no SQL access control (CREATE USER, GRANT); sentry-tenants needs ClickHouse {}.{} or newer",
        MIN_VERSION.0,
        MIN_VERSION.1
    )]
    ServerTooOld { version: String },
    #[error(
        "the ClickHouse admin user lacks a privilege ({message}): it needs access_management plus CREATE DATABASE, CREATE USER, ALTER USER, DROP USER, DROP DATABASE, CREATE ROLE, DROP ROLE, ROLE ADMIN, SHOW USERS, SHOW ROLES, KILL QUERY, CREATE/ALTER/DROP SETTINGS PROFILE and QUOTA, and the tenant privileges WITH GRANT OPTION"
    )]
    PermissionDenied { message: String },
    #[error(
        "ClickHouse has no cluster named {cluster:?} (system.clusters): check --clickhouse-cluster against the server's remote_servers"
    )]
    ClusterUnknown { cluster: String },
    #[error(
        "refusing to provision ON CLUSTER {cluster:?}: the server keeps users in no replicated user directory{detail}, so a tenant's user would exist only on the nodes up at that moment; add a <replicated> entry to <user_directories> on every node"
    )]
    ClusterUsersNotReplicated { cluster: String, detail: String },
    #[error(
        "tenant {name:?} has maxMemoryPerQuery {value:?}, which is not 1 to 9999 followed by Mi or Gi: fix spec.limits (the CRD's schema refuses it; this object was written around it)"
    )]
    BadLimit { name: String, value: String },
    #[error("cannot read the ClickHouse CA bundle {path}: {detail}")]
    CaFile { path: String, detail: String },
    #[error("ClickHouse refused a statement: {message}")]
    ClickHouse { message: String },
    #[error("tenant {name:?} does not exist in namespace {namespace:?}")]
    TenantMissing { name: String, namespace: String },
    #[error("tenant {name:?} is being deleted; nothing to do")]
    TenantDeleting { name: String },
    #[error(
        "tenant {name:?} is not being deleted: Deprovision runs only for a Tenant being deleted (delete the Tenant; its spec.reclaimPolicy decides what happens in ClickHouse)"
    )]
    NotDeleting { name: String },
    #[error(
        "{reason}; give the tenant another name, or remove the object in ClickHouse if it is a leftover nobody uses"
    )]
    NotOurs { reason: String },
    #[error("tenant {name:?} is not provisioned yet: run Provision first")]
    NotProvisioned { name: String },
    #[error(
        "ClickHouse user {user} does not exist although tenant {name:?} is provisioned: run Provision with --rotate to recreate its credentials deliberately"
    )]
    UserMissing { name: String, user: String },
    #[error(
        "ClickHouse user {user} exists but its credentials Secret {secret} is gone: refusing to rotate the password (open connections would break). To set a new password deliberately, run `sentry-tenants provision-tenant {tenant} --rotate`"
    )]
    WouldRotate {
        tenant: String,
        user: String,
        secret: String,
    },
    #[error(
        "ClickHouse user {user} does not accept the password in Secret {secret} (it was created some other way): refusing to rotate it. To take it over deliberately, run `sentry-tenants provision-tenant {tenant} --rotate`"
    )]
    PasswordMismatch {
        tenant: String,
        user: String,
        secret: String,
    },
    #[error(
        "Secret {secret} is not tenant {tenant:?}'s ({owner}): refusing to read or change it; if it is a leftover, delete it, otherwise give the tenant another name"
    )]
    ForeignSecret {
        tenant: String,
        secret: String,
        owner: String,
    },
    #[error(
        "Secret {secret} has no usable `password` key; delete it and re-run with --rotate to issue new credentials"
    )]
    BadSecret { secret: String },
    #[error("not every copy of the credentials could be written: {detail}")]
    CopiesUndelivered { detail: String },
    #[error("Kubernetes API: cannot {action}: {detail}")]
    Kubernetes { action: String, detail: String },
    #[error(
        "the Kubernetes API was unavailable: cannot {action}: {detail} (a run waits out a few minutes of this; check kube-apiserver)"
    )]
    ApiUnavailable { action: String, detail: String },
    #[error("cannot generate a password: the system's random source failed")]
    Random,
}

impl ProvisionError {
    /// Maps a ClickHouse failure to the class an operator acts on.
    pub fn from_clickhouse(url: &str, error: ChError) -> Self {
        match error {
            ChError::Unreachable(detail) => Self::Unreachable {
                url: url.to_owned(),
                detail,
            },
            ChError::Server {
                status,
                code,
                message,
            } => match code {
                Some(
                    codes::UNKNOWN_USER
                    | codes::WRONG_PASSWORD
                    | codes::AUTHENTICATION_FAILED
                    | codes::IP_ADDRESS_NOT_ALLOWED,
                ) => Self::AuthFailed { message },
                None if status == 401 || status == 403 => Self::AuthFailed { message },
                Some(codes::ACCESS_DENIED) => Self::PermissionDenied { message },
                _ => Self::ClickHouse { message },
            },
        }
    }

    /// Maps a Kubernetes API failure, naming what we were doing and, for 403s, the missing permission.
    /// An apiserver that could not be reached or could not answer (restarting, overloaded) is
    /// [`Self::ApiUnavailable`]: worth the same run again once it is back.
    pub fn kube(action: impl Into<String>, error: kube::Error) -> Self {
        let action = action.into();
        if api_unavailable(&error) {
            let detail = error.to_string();
            return Self::ApiUnavailable { action, detail };
        }
        let detail = match &error {
            kube::Error::Api(s) if s.code == 403 => {
                format!(
                    "forbidden: the provisioner's ServiceAccount lacks the permission to {action} ({})",
                    s.message
                )
            }
            kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
            other => other.to_string(),
        };
        Self::Kubernetes { action, detail }
    }

    /// Whether the run failed only because the Kubernetes API was unavailable.
    pub fn is_api_unavailable(&self) -> bool {
        matches!(self, Self::ApiUnavailable { .. })
    }
}

/// No connection, a connection broken mid-answer, or an answer that says "not now": 429 (priority and
/// fairness), 500, 502, 503, 504. Anything else the apiserver said (403, 404, 409, 422) is an answer.
fn api_unavailable(error: &kube::Error) -> bool {
    match error {
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        kube::Error::Api(status) => matches!(status.code, 429 | 500 | 502 | 503 | 504),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(status: u16, code: Option<u32>) -> ChError {
        ChError::Server {
            status,
            code,
            message: "m".into(),
        }
    }

    #[test]
    fn clickhouse_failures_are_classified() {
        let c = |e| ProvisionError::from_clickhouse("http://ch:8123", e);
        assert!(matches!(
            c(ChError::Unreachable("refused".into())),
            ProvisionError::Unreachable { .. }
        ));
        assert!(matches!(
            c(server(401, Some(193))),
            ProvisionError::AuthFailed { .. }
        ));
        assert!(matches!(
            c(server(500, Some(516))),
            ProvisionError::AuthFailed { .. }
        ));
        for refused in [401, 403] {
            assert!(matches!(
                c(server(refused, None)),
                ProvisionError::AuthFailed { .. }
            ));
        }
        // A server error without a ClickHouse code (a proxy's 500 or 502) is no credentials problem.
        for other in [400, 500, 502] {
            assert!(matches!(
                c(server(other, None)),
                ProvisionError::ClickHouse { .. }
            ));
        }
        assert!(matches!(
            c(server(500, Some(497))),
            ProvisionError::PermissionDenied { .. }
        ));
        assert!(matches!(
            c(server(400, Some(62))),
            ProvisionError::ClickHouse { .. }
        ));
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("m", "r").with_code(code),
        ))
    }

    #[test]
    fn an_unreachable_or_unready_apiserver_is_told_apart_from_its_answers() {
        let k = |e| ProvisionError::kube("get tenant acme", e);
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        for unavailable in [
            refused,
            api_error(429),
            api_error(500),
            api_error(502),
            api_error(503),
            api_error(504),
        ] {
            let e = k(unavailable);
            assert!(e.is_api_unavailable(), "{e}");
            assert!(
                e.to_string()
                    .starts_with("the Kubernetes API was unavailable: cannot get tenant acme: ")
            );
        }
        for answer in [400, 401, 403, 404, 409, 422] {
            let e = k(api_error(answer));
            assert!(!e.is_api_unavailable(), "{answer}: {e}");
            assert!(matches!(e, ProvisionError::Kubernetes { .. }));
        }
        assert_eq!(
            k(api_error(403)).to_string(),
            "Kubernetes API: cannot get tenant acme: forbidden: the provisioner's ServiceAccount lacks the permission to get tenant acme (m)"
        );
        assert_eq!(
            k(api_error(404)).to_string(),
            "Kubernetes API: cannot get tenant acme: m (404)"
        );
    }

    #[test]
    fn messages_are_one_line_and_say_what_to_do() {
        let e = ProvisionError::ServerTooOld {
            version: "18.16.1".into(),
        };
        assert_eq!(
            e.to_string(),
            "ClickHouse 18.16.1 is too old: it has no SQL access control (CREATE USER, GRANT); sentry-tenants needs ClickHouse 20.4 or newer"
        );
        let e = ProvisionError::WouldRotate {
            tenant: "acme".into(),
            user: "u".into(),
            secret: "s".into(),
        };
        assert!(e.to_string().contains("--rotate") && !e.to_string().contains('\n'));
    }
}
