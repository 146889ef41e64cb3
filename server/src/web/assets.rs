//! The dashboard's static files, embedded at build time (`build.rs` puts them in `$OUT_DIR/site`): the
//! binary serves the whole dashboard with no files beside it.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "$OUT_DIR/site"]
pub struct Site;

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("wasm") => "application/wasm",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

/// `/pkg/*` and `/assets/*`, revalidated by ETag (the file names carry no hash).
pub async fn serve(
    Path(path): Path<String>,
    headers: axum::http::HeaderMap,
    prefix: &'static str,
) -> Response {
    let full = format!("{prefix}/{path}");
    let Some(file) = Site::get(&full) else {
        return (StatusCode::NOT_FOUND, "not found").into_response();
    };
    let etag = format!("\"{}\"", hex(&file.metadata.sha256_hash()[..12]));
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(etag.as_str())
    {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mut response = file.data.into_owned().into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&full)),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex is a valid header"),
    );
    response
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
