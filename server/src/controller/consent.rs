//! Whether a namespace consents to copies of tenants' credentials: whether the provisioner's
//! ServiceAccount may write Secrets there (`sentry-tenants grant-credentials NAMESPACE` binds it).
//!
//! The operator asks the apiserver, never guesses from objects it would need cluster-wide reads for
//! (RoleBindings), and is never refused: first a SelfSubjectAccessReview ("may I ask there?", which
//! any account may make), then — only if so — a LocalSubjectAccessReview in that namespace about the
//! provisioner. A ServiceAccount's 403 is what security tooling alerts on. Answers are kept for
//! half of [`CONSENT_RECHECK`] per namespace, so many tenants waiting on one namespace cost one question.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, ResourceAttributes, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use super::tenant::{CONSENT_RECHECK, Consents};

/// Namespaces whose answer is kept; past this the oldest half is forgotten (asked again if needed).
const MAX_KEPT: usize = 4096;

pub struct ConsentChecks {
    client: Client,
    /// `system:serviceaccount:<install namespace>:<provisioner account>`.
    provisioner: String,
    kept: Mutex<HashMap<String, (Instant, bool)>>,
}

impl ConsentChecks {
    pub fn new(client: Client, install_namespace: &str, provisioner_account: &str) -> Self {
        Self {
            client,
            provisioner: format!("system:serviceaccount:{install_namespace}:{provisioner_account}"),
            kept: Mutex::default(),
        }
    }

    /// Whether each of `namespaces` consents now.
    pub async fn of(&self, namespaces: &[String]) -> kube::Result<Consents> {
        let mut consents = Consents::new();
        for namespace in namespaces {
            let answer = match self.kept(namespace) {
                Some(answer) => answer,
                None => {
                    let answer = self.ask(namespace).await?;
                    self.keep(namespace, answer);
                    answer
                }
            };
            consents.insert(namespace.clone(), answer);
        }
        Ok(consents)
    }

    fn kept(&self, namespace: &str) -> Option<bool> {
        let kept = self.kept.lock().expect("consent cache lock");
        let (asked, answer) = kept.get(namespace)?;
        (asked.elapsed() < ttl()).then_some(*answer)
    }

    fn keep(&self, namespace: &str, answer: bool) {
        let mut kept = self.kept.lock().expect("consent cache lock");
        if kept.len() >= MAX_KEPT {
            let mut ages: Vec<Instant> = kept.values().map(|(at, _)| *at).collect();
            ages.sort();
            let cutoff = ages[ages.len() / 2];
            kept.retain(|_, (at, _)| *at > cutoff);
        }
        kept.insert(namespace.to_owned(), (Instant::now(), answer));
    }

    async fn ask(&self, namespace: &str) -> kube::Result<bool> {
        let may_ask = crate::cluster::access_review(
            &self.client,
            Some(namespace),
            "authorization.k8s.io",
            ("create", "localsubjectaccessreviews"),
        )
        .await?;
        if !may_ask.allowed {
            return Ok(false);
        }
        let review = LocalSubjectAccessReview {
            metadata: ObjectMeta {
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            spec: SubjectAccessReviewSpec {
                user: Some(self.provisioner.clone()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some("create".into()),
                    resource: Some("secrets".into()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..LocalSubjectAccessReview::default()
        };
        let api: Api<LocalSubjectAccessReview> = Api::namespaced(self.client.clone(), namespace);
        let answer = api.create(&PostParams::default(), &review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// Half the recheck interval: a tenant that wakes to look again gets a fresh answer.
fn ttl() -> Duration {
    Duration::try_from(CONSENT_RECHECK).expect("a positive interval") / 2
}
