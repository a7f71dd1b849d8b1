//! The cache of verified signatures, installed as this process's jsonwebtoken provider before
//! any token is decoded (as `writ` does at start): a token decoded again is answered from it,
//! and a forged one is still refused. A test binary of its own, since the provider is chosen
//! once per process.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

#[test]
fn installed_the_cache_answers_a_token_decoded_again() {
    assert!(writ_api::signatures::install(), "the first provider of this process");
    assert!(writ_api::signatures::install(), "installing again changes nothing");
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let signing = EncodingKey::from_ed_pem(pair.serialize_pem().as_bytes()).unwrap();
    let key = DecodingKey::from_ed_der(pair.public_key_raw());
    let claims = |sub: &str| serde_json::json!({"sub": sub, "exp": 4_000_000_000u64});
    let token = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims("agent"), &signing).unwrap();
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.validate_aud = false;
    let decode = |t: &str| jsonwebtoken::decode::<serde_json::Value>(t, &key, &validation);

    decode(&token).expect("verifies");
    let before = writ_api::signatures::hits();
    assert_eq!(decode(&token).expect("verifies again").claims["sub"], "agent");
    assert_eq!(writ_api::signatures::hits(), before + 1, "from the cache");

    let other = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims("root"), &signing).unwrap();
    let signature = token.rsplit_once('.').unwrap().1;
    let forged = format!("{}.{signature}", other.rsplit_once('.').unwrap().0);
    assert!(decode(&forged).is_err(), "the signature of other claims");
    assert_eq!(writ_api::signatures::hits(), before + 1);
}
