//! `image push`'s registry client against a real registry (Debian's docker-registry, the CNCF
//! distribution) serving TLS from a private CA and asking for basic auth: the pushed manifest is read
//! back by skopeo, byte for byte; a wrong password, no credentials and an unknown CA each fail with
//! their own error and leave nothing behind.

use sentry_tenants::image::archive::Image;
use sentry_tenants::image::registry::{Credentials, PushError, Reference, Registry};
use sentry_tenants::image::rootfs::{Body, Entry, Tree};
use sentry_tenants_tests::registry::TestRegistry;

/// A small image: what is pushed does not matter to the protocol, and the binary's image takes a
/// while to build.
fn small_image(marker: &str) -> Image {
    let tree = Tree::from([
        (
            "etc".to_owned(),
            Entry {
                mode: 0o755,
                owner: 0,
                body: Body::Dir,
            },
        ),
        (
            "etc/marker".to_owned(),
            Entry {
                mode: 0o644,
                owner: 0,
                body: Body::File(marker.as_bytes().to_vec()),
            },
        ),
    ]);
    Image::build(&tree).unwrap()
}

async fn registry(name: &str) -> TestRegistry {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("registry")
        .join(name);
    TestRegistry::start(&dir, "127.0.0.1", "pusher", "correct horse").await
}

fn with_ca(registry: &TestRegistry) -> sentry_tenants::tls::Connector {
    sentry_tenants::tls::with_ca_bundle(&std::fs::read(&registry.ca).unwrap()).unwrap()
}

fn credentials(username: &str, password: &str) -> Credentials {
    Credentials {
        username: username.to_owned(),
        password: password.to_owned(),
    }
}

#[tokio::test]
async fn a_push_with_the_right_credentials_stores_the_manifest_byte_for_byte_and_again_changes_nothing()
 {
    let registry = registry("push").await;
    let reference =
        Reference::parse(&format!("{}/team/sentry-tenants:v1", registry.address)).unwrap();
    let image = small_image("one");
    let login = credentials(&registry.username, &registry.password);
    let client = Registry::connect(&reference, with_ca(&registry), false, Some(&login))
        .await
        .unwrap();
    let digest = client.push(&image).await.unwrap();
    assert_eq!(digest, image.digest());
    let stored = registry
        .manifest(&format!("{}/team/sentry-tenants:v1", registry.address))
        .unwrap();
    assert_eq!(stored, image.manifest.bytes);
    let by_digest = registry.manifest(&reference.by_digest(&digest)).unwrap();
    assert_eq!(by_digest, image.manifest.bytes);

    // The blobs are there now: a second push finds them and only puts the manifest again.
    assert_eq!(client.push(&image).await.unwrap(), digest);
}

#[tokio::test]
async fn a_wrong_password_is_refused_at_login_and_nothing_is_pushed() {
    let registry = registry("wrong").await;
    let reference =
        Reference::parse(&format!("{}/team/sentry-tenants:v1", registry.address)).unwrap();
    let wrong = credentials(&registry.username, "battery staple");
    let Err(err) = Registry::connect(&reference, with_ca(&registry), false, Some(&wrong)).await
    else {
        panic!("a wrong password logged in");
    };
    assert!(
        matches!(&err, PushError::Refused { username, status, .. } if username == "pusher" && status.as_u16() == 401),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the registry {} refused the credentials of \"pusher\" (401 Unauthorized)",
            registry.address
        )
    );
    let missing = registry
        .manifest(&format!("{}/team/sentry-tenants:v1", registry.address))
        .unwrap_err();
    assert!(missing.contains("manifest unknown"), "{missing}");
}

#[tokio::test]
async fn no_credentials_for_a_registry_that_asks_says_how_to_give_them() {
    let registry = registry("anonymous").await;
    let reference = Reference::parse(&format!("{}/team/sentry-tenants", registry.address)).unwrap();
    let Err(err) = Registry::connect(&reference, with_ca(&registry), false, None).await else {
        panic!("an anonymous push was let in");
    };
    assert!(matches!(err, PushError::NeedsCredentials(_)), "{err}");
    assert!(err.to_string().contains("--password-stdin"), "{err}");
}

#[tokio::test]
async fn a_registry_whose_ca_is_not_trusted_is_not_spoken_to() {
    let registry = registry("untrusted").await;
    let reference = Reference::parse(&format!("{}/team/sentry-tenants", registry.address)).unwrap();
    let system = sentry_tenants::tls::with_system_roots().unwrap();
    let login = credentials(&registry.username, &registry.password);
    let Err(err) = Registry::connect(&reference, system, false, Some(&login)).await else {
        panic!("a certificate from an unknown CA was trusted");
    };
    assert!(matches!(err, PushError::Unreachable(..)), "{err}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
}
