//! Strict JSON: the one parser of every JSON file a user gives (graph, payload, tensor, case).
//!
//! `serde_json::from_str::<Value>` keeps the last of two members with the same key, so
//! `{"eps": 1e-5, "eps": -1}` would silently mean `-1`. [`parse`] builds the same `Value`
//! through a visitor that refuses a repeated key instead, naming it and where it is.

use crate::error::{IrError, Result};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses `text` as JSON, rejecting an object with a repeated key (the error gives the key, cut
/// to [`crate::error::shorten`]'s length, and its line and column). Otherwise the same `Value`
/// as `serde_json::from_str`.
pub fn parse(text: &str) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = StrictValue.deserialize(&mut de).map_err(IrError::from)?;
    de.end().map_err(IrError::from)?;
    Ok(v)
}

/// Deserializes one JSON value, refusing repeated keys in every object it contains (also the
/// element reader of [`crate::format::stream`]).
pub(crate) struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Value, E> {
        // JSON text has no NaN or infinity, so the parser never hands one over
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a JSON number")))
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element_seed(StrictValue)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(duplicate_key(&key));
            }
            let v = map.next_value_seed(StrictValue)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// The error for a member named twice in one object.
pub(crate) fn duplicate_key<E: de::Error>(key: &str) -> E {
    E::custom(format!(
        "duplicate key \"{}\" (a JSON object may name each member once)",
        crate::error::shorten(key)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_value_as_serde_json_without_duplicates() {
        let text = r#"{"a": [1, -2, 0.1, 1e300, true, null, "s"], "b": {"c": {}}, "d": []}"#;
        assert_eq!(
            parse(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn a_repeated_key_is_an_error_naming_it_at_any_depth() {
        for (text, line) in [
            ("{\"eps\": 1e-5, \"eps\": -1}", 1),
            ("{\"a\": [{\"b\": 1,\n \"b\": 2}]}", 2),
        ] {
            let e = parse(text).unwrap_err();
            let IrError::Json { line: l, .. } = &e else {
                panic!("{e:?}")
            };
            assert_eq!(*l, line, "{e}");
            assert!(e.to_string().contains("duplicate key"), "{e}");
        }
        assert!(parse(r#"{"x": {"a": 1}, "y": {"a": 1}}"#).is_ok());
    }

    #[test]
    fn trailing_text_and_bad_json_are_errors() {
        assert!(parse("{} x").is_err());
        assert!(parse("{\"a\": ").is_err());
    }
}
