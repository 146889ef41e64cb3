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
    small_image_for(marker, sentry_tenants::image::archive::architecture())
}

fn small_image_for(marker: &str, architecture: &str) -> Image {
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
    Image::build_for(&tree, architecture).unwrap()
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

/// The registry's client for `tag`, logged in as its account.
async fn logged_in(registry: &TestRegistry, tag: &str) -> (Reference, Registry) {
    let reference = Reference::parse(tag).unwrap();
    let login = credentials(&registry.username, &registry.password);
    let client = Registry::connect(&reference, with_ca(registry), false, Some(&login))
        .await
        .unwrap();
    (reference, client)
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
    let tag = format!("{}/team/sentry-tenants:v1", registry.address);
    let (reference, client) = logged_in(&registry, &tag).await;
    let image = small_image("one");
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
    assert_eq!(registry.manifest(&tag).unwrap(), image.manifest.bytes);
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

/// The tag's document as skopeo reads it: (its platforms and digests if an index, else nothing).
fn index_entries(registry: &TestRegistry, reference: &str) -> Vec<(String, String)> {
    let raw: serde_json::Value =
        serde_json::from_slice(&registry.manifest(reference).unwrap()).unwrap();
    assert_eq!(
        raw["mediaType"], "application/vnd.oci.image.index.v1+json",
        "{raw}"
    );
    raw["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let platform = &e["platform"];
            (
                format!(
                    "{}/{}",
                    platform["os"].as_str().unwrap(),
                    platform["architecture"].as_str().unwrap()
                ),
                e["digest"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn pushes_into_an_index_gather_one_image_per_platform_under_one_tag() {
    let registry = registry("index").await;
    let tag = format!("{}/team/sentry-tenants:v2", registry.address);
    let (reference, client) = logged_in(&registry, &tag).await;
    // The tag first names one plain image, as a push without --index leaves it.
    let amd64 = small_image_for("amd64 build", "amd64");
    client.push(&amd64).await.unwrap();

    let arm64 = small_image_for("arm64 build", "arm64");
    let index = client.push_into_index(&arm64).await.unwrap();
    assert_eq!(
        index_entries(&registry, &tag),
        [
            ("linux/amd64".to_owned(), amd64.digest()),
            ("linux/arm64".to_owned(), arm64.digest()),
        ]
    );
    let stored = registry.manifest(&reference.by_digest(&index)).unwrap();
    assert_eq!(
        registry.manifest(&tag).unwrap(),
        stored,
        "the index is pushed by the digest returned"
    );

    // A rebuilt amd64 image replaces its platform's entry and keeps the other.
    let amd64_again = small_image_for("amd64 rebuild", "amd64");
    client.push_into_index(&amd64_again).await.unwrap();
    assert_eq!(
        index_entries(&registry, &tag),
        [
            ("linux/amd64".to_owned(), amd64_again.digest()),
            ("linux/arm64".to_owned(), arm64.digest()),
        ]
    );
    // Every entry is an image the registry holds.
    for (_, digest) in index_entries(&registry, &tag) {
        registry.manifest(&reference.by_digest(&digest)).unwrap();
    }
}

#[tokio::test]
async fn an_index_push_to_a_new_tag_makes_an_index_of_one() {
    let registry = registry("index-new").await;
    let tag = format!("{}/team/sentry-tenants:v3", registry.address);
    let (_, client) = logged_in(&registry, &tag).await;
    let image = small_image_for("only", "arm64");
    client.push_into_index(&image).await.unwrap();
    assert_eq!(
        index_entries(&registry, &tag),
        [("linux/arm64".to_owned(), image.digest())]
    );
}
