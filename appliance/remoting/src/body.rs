//! fastjson-shaped JSON bodies (`headers.md` §0.2 and per-command sections), and the one
//! fastjson-tolerant reader every body goes through: the typed decoders below read
//! [`crate::json::parse`]'s values, and [`decode_json`] / [`to_standard_json`] put the same
//! reader in front of types that derive `serde::Deserialize`.

pub mod acl;
pub mod cluster;
pub mod consumer;
pub mod controller;
pub mod ha;
pub mod heartbeat;
pub mod kv;
pub mod register;
pub mod route;
pub mod stats;
pub mod subscription;
#[doc(hidden)]
pub mod testing;
pub mod topic;

use crate::json::{self, BodyError};

/// Decodes a JSON body in any dialect peers send (fastjson's bare numeric keys, trailing
/// commas, `L`-suffixed longs, a BOM or NUL padding) into a `serde` type, through the same
/// reader as every typed body decoder.
pub fn decode_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BodyError> {
    let standard = to_standard_json(body)?;
    serde_json::from_str(&standard).map_err(|e| BodyError::Layout(e.to_string()))
}

/// Rewrites a body of any accepted dialect as standard JSON (numeric keys quoted), for
/// readers that only take the standard form.
pub fn to_standard_json(body: &[u8]) -> Result<String, BodyError> {
    Ok(json::parse(body)?.to_json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_json_reads_the_fastjson_dialect_into_serde_types() {
        let text = br#"{"offsetTable":{"T@G":{0:12,1:-5, 12 :7}},"s":"{0:1}","a":[1,2,],"n":9L}"#;
        let v: serde_json::Value = decode_json(text).unwrap();
        assert_eq!(v["offsetTable"]["T@G"]["1"], -5);
        assert_eq!(v["offsetTable"]["T@G"]["12"], 7);
        assert_eq!(v["s"], "{0:1}");
        assert_eq!(v["a"][1], 2);
        assert_eq!(v["n"], 9);
        assert!(decode_json::<serde_json::Value>(b"{\"a\":").is_err());
    }
}
