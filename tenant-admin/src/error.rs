//! HTTP mapping of rejections: every error response is an [`ErrorBody`] whose status comes
//! from the reason-code catalog. Internals never go on the wire.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use writ_api::{ReasonCode, Rejection};

/// A rejection on its way to an HTTP client.
#[derive(Debug)]
pub struct ApiError(pub Rejection);

impl ApiError {
    pub fn new(reason: ReasonCode, message: impl Into<String>) -> Self {
        ApiError(Rejection::new(reason, message))
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        ApiError(r)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = writ_client::http_answer(&self.0);
        (status, Json(body)).into_response()
    }
}

/// `Json<T>` whose failures are reason-coded: 413 PAYLOAD_TOO_LARGE for an oversized body,
/// 400 INPUT_INVALID (with serde's precise message) for anything malformed or unknown.
pub struct ValidJson<T>(pub T);

impl<S, T> FromRequest<S> for ValidJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ValidJson(v)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::new(ReasonCode::PAYLOAD_TOO_LARGE, "request body exceeds the size limit"))
            }
            Err(rejection) => Err(ApiError::new(ReasonCode::INPUT_INVALID, rejection.body_text())),
        }
    }
}

/// Query-string parameters whose failures are `INPUT_INVALID` with serde's precise message.
pub struct ValidQuery<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for ValidQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ValidQuery(v)),
            Err(rejection) => Err(ApiError::new(ReasonCode::INPUT_INVALID, rejection.body_text())),
        }
    }
}

/// Fallback for unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::new(ReasonCode::NOT_FOUND, "no such route")
}

/// Fallback for a known route with the wrong method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(ReasonCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
}
