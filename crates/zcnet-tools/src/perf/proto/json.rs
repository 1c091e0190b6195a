//! Reading JSON values the way iperf3's cJSON code does.
//!
//! cJSON keeps every number as a `double` and a saturated `int64_t` (`valueint`, src/cjson.c),
//! and iperf3 reads integers through `valueint`: `10`, `10.0` and `1e1` are all 10. It prints a
//! number as an integer when it is one (`print_number`), so integers arrive as integers.

use serde_json::{Map, Value};

use super::error::ProtoError;

/// A JSON object, as iperf3's messages are.
pub(crate) type Object = Map<String, Value>;

/// The object a message must be.
pub(crate) fn object(value: &Value) -> Result<&Object, ProtoError> {
    value.as_object().ok_or(ProtoError::NotAnObject)
}

/// A number as cJSON's `valueint`: floats truncated toward zero, saturated to `i64`.
pub(crate) fn int(value: &Value) -> Option<i64> {
    let n = value.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    if n.as_u64().is_some() {
        return Some(i64::MAX);
    }
    // `as` saturates and maps NaN to 0, as cJSON's clamping does.
    n.as_f64().map(|f| f as i64)
}

/// An integer key converted to the field's type; `None` when the key is absent or not a number
/// (iperf3 3.18+ ignores a key of the wrong type, keeping its default).
pub(crate) fn int_as<T: TryFrom<i64>>(
    obj: &Object,
    key: &'static str,
) -> Result<Option<T>, ProtoError> {
    let Some(i) = obj.get(key).and_then(int) else {
        return Ok(None);
    };
    T::try_from(i)
        .map(Some)
        .map_err(|_| ProtoError::InvalidField {
            key,
            reason: "number out of range",
        })
}

/// An unsigned count such as `bytes` that may exceed `i64` in principle.
pub(crate) fn uint(value: &Value) -> Option<u64> {
    let n = value.as_number()?;
    n.as_u64()
        .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

/// A flag: `true`, or any number but 0. iperf3 sends `true` for some flags (`"reverse"`) and
/// `1` for others (`"udp_counters_64bit"`).
pub(crate) fn flag(obj: &Object, key: &str) -> bool {
    match obj.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(v) => int(v).is_some_and(|i| i != 0),
        None => false,
    }
}

/// A string key.
pub(crate) fn string(obj: &Object, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// A required number, as `f64`.
pub(crate) fn req_f64(obj: &Object, key: &'static str) -> Result<f64, ProtoError> {
    obj.get(key)
        .and_then(Value::as_f64)
        .ok_or(ProtoError::MissingField(key))
}

/// A required integer.
pub(crate) fn req_int(obj: &Object, key: &'static str) -> Result<i64, ProtoError> {
    obj.get(key)
        .and_then(int)
        .ok_or(ProtoError::MissingField(key))
}

/// An optional integer that, if present, must be a number.
pub(crate) fn opt_int(obj: &Object, key: &'static str) -> Result<Option<i64>, ProtoError> {
    obj.get(key)
        .map(|v| int(v).ok_or(ProtoError::MissingField(key)))
        .transpose()
}

/// An optional number that, if present, must be a number.
pub(crate) fn opt_f64(obj: &Object, key: &'static str) -> Result<Option<f64>, ProtoError> {
    obj.get(key)
        .map(|v| v.as_f64().ok_or(ProtoError::MissingField(key)))
        .transpose()
}
