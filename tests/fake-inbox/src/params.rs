//! Form and query parameters (`application/x-www-form-urlencoded`), as
//! OAuth reads them: each at most once (RFC 6749 §3.1), bounded in count
//! and length.

use std::collections::HashMap;

/// Parameters read at most.
const MAX_PARAMS: usize = 32;
/// The longest parameter value, in bytes.
const MAX_VALUE_BYTES: usize = 4096;

/// Why parameters were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParamsError {
    #[error("the parameter `{0}` is given more than once")]
    Repeated(String),
    #[error("more than {MAX_PARAMS} parameters")]
    TooMany,
    #[error("the parameter `{0}` is longer than {MAX_VALUE_BYTES} bytes")]
    TooLong(String),
}

/// The parameters of a query string or a form body; an empty value counts
/// as absent (RFC 6749 §3.1).
#[derive(Debug, Default)]
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    pub(crate) fn parse(encoded: &[u8]) -> Result<Params, ParamsError> {
        let mut params = HashMap::new();
        for (name, value) in form_urlencoded::parse(encoded) {
            if params.len() == MAX_PARAMS {
                return Err(ParamsError::TooMany);
            }
            if value.len() > MAX_VALUE_BYTES || name.len() > MAX_VALUE_BYTES {
                return Err(ParamsError::TooLong(name.chars().take(64).collect()));
            }
            if value.is_empty() {
                continue;
            }
            if params.insert(name.to_string(), value.into_owned()).is_some() {
                return Err(ParamsError::Repeated(name.chars().take(64).collect()));
            }
        }
        Ok(Params(params))
    }

    /// The value of `name`, if given.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_counts_once_and_empty_is_absent() {
        let params = Params::parse(b"a=1&b=&c=x%20y+z").unwrap();
        assert_eq!((params.get("a"), params.get("b"), params.get("c")), (Some("1"), None, Some("x y z")));
        assert_eq!(Params::parse(b"a=1&a=2").unwrap_err(), ParamsError::Repeated("a".into()));
        let many: String = (0..40).map(|i| format!("p{i}=v&")).collect();
        assert_eq!(Params::parse(many.as_bytes()).unwrap_err(), ParamsError::TooMany);
        let long = format!("a={}", "x".repeat(MAX_VALUE_BYTES + 1));
        assert_eq!(Params::parse(long.as_bytes()).unwrap_err(), ParamsError::TooLong("a".into()));
    }
}
