//! Errors as OpenAI's API returns them: `{"error": {"message", "type", "param", "code"}}` with
//! an HTTP status.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An error answer of the API.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`.
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 `invalid_request_error`.
    pub fn invalid(
        message: impl Into<String>,
        param: Option<&str>,
        code: Option<&'static str>,
    ) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code,
        }
    }

    /// A 400 for a field of the wrong JSON type.
    pub fn invalid_type(param: &str, expected: &str, detail: impl std::fmt::Display) -> Self {
        Self::invalid(
            format!("Invalid type for '{param}': expected {expected} ({detail})."),
            Some(param),
            Some("invalid_type"),
        )
    }

    /// A 400 for a field whose value is out of range.
    pub fn invalid_value(param: &str, message: impl Into<String>) -> Self {
        Self::invalid(message, Some(param), Some("invalid_value"))
    }

    /// A 400 for a field this server does not support (with the value given).
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        Self::invalid(message, Some(param), Some("unsupported_parameter"))
    }

    /// A 400 for a missing required field.
    pub fn missing(param: &str) -> Self {
        Self::invalid(
            format!("Missing required parameter: '{param}'."),
            Some(param),
            Some("missing_required_parameter"),
        )
    }

    /// A 401 for a wrong or missing API key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// A 404 for a path no route serves.
    pub fn unknown_url(method: &str, path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("Unknown request URL: {method} {path}."),
            kind: "invalid_request_error",
            param: None,
            code: Some("unknown_url"),
        }
    }

    /// A 405 for a path served under other methods.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("Method {method} is not allowed on {path}."),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
        }
    }

    /// A 429: the queue of requests waiting to start is full.
    pub fn queue_full(max_queue: usize) -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "The server is busy: {max_queue} requests are already waiting to start. \
                 Retry later."
            ),
            kind: "requests",
            param: None,
            code: Some("rate_limit_exceeded"),
        }
    }

    /// A 500: the model failed while the request ran.
    pub fn server(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// A 503: the engine has stopped (the server is shutting down).
    pub fn unavailable() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "The server is shutting down.".into(),
            kind: "server_error",
            param: None,
            code: Some("service_unavailable"),
        }
    }

    /// The `{"error": {...}}` body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body().to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}
