//! What the rules need to know besides the tenant and its runs, asked of the apiserver (or the
//! caches) before they decide: whether namespaces consent to copies (rule 9), whether the
//! credentials Secret is still there (rule 11).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use super::copies::{Consents, namespaces_to_ask};
use super::secret_loss::{SecretState, secret_state, watched_marker};
use crate::controller::{Cache, Context, Result, cached_or_fetched};
use crate::crd::Tenant;

/// What the rules read besides (tenant, runs, now).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Rule 9: whether each namespace of an out-of-date copy consents.
    pub consents: Consents,
    /// Rule 11: where the credentials Secret stands.
    pub secret: SecretState,
}

impl From<Consents> for Observed {
    fn from(consents: Consents) -> Self {
        Observed {
            consents,
            ..Observed::default()
        }
    }
}

/// Asks what the rules need for `tenant` now.
pub async fn observe(tenant: &Tenant, ctx: &Context) -> Result<Observed> {
    let consents = ctx.consents.of(&namespaces_to_ask(tenant)).await?;
    Ok(Observed {
        consents,
        secret: secret_of(tenant, ctx).await?,
    })
}

/// Rule 11's fact: the marker of the Secret the tenant's status names, from the cache once it had
/// its first list (before that: unknown). A miss is confirmed against the API: the provisioner
/// writes the marker before its report, but the ConfigMap watch may deliver it after the Tenant's.
async fn secret_of(tenant: &Tenant, ctx: &Context) -> Result<SecretState> {
    let Some(marker_name) = watched_marker(tenant) else {
        return Ok(SecretState::Unknown);
    };
    if !ctx.stores.synced.has(Cache::Markers) {
        return Ok(SecretState::Unknown);
    }
    let namespace = &ctx.config.shared.namespace;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let marker = cached_or_fetched(&ctx.stores.markers, &api, namespace, &marker_name).await?;
    Ok(secret_state(tenant, marker.as_deref()))
}
