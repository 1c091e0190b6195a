use super::super::{Cookie, ProtoError, COOKIE_ALPHABET, COOKIE_SIZE};

fn valid() -> [u8; COOKIE_SIZE] {
    let mut b = [b'a'; COOKIE_SIZE];
    b[..8].copy_from_slice(b"xyz23456");
    b[COOKIE_SIZE - 1] = 0;
    b
}

#[zcnet_testkit::test]
fn from_random_maps_like_make_cookie() {
    let mut random = [0u8; 36];
    for (i, r) in random.iter_mut().enumerate() {
        *r = (i * 7 + 200) as u8;
    }
    let c = Cookie::from_random(&random);
    let bytes = c.as_bytes();
    for i in 0..36 {
        assert_eq!(
            bytes[i],
            COOKIE_ALPHABET[random[i] as usize % 32],
            "byte {i}"
        );
    }
    assert_eq!(bytes[36], 0);
    assert_eq!(c.as_str().len(), 36);
}

#[zcnet_testkit::test]
fn from_random_edges() {
    assert_eq!(Cookie::from_random(&[0; 36]).as_str(), "a".repeat(36));
    assert_eq!(Cookie::from_random(&[255; 36]).as_str(), "7".repeat(36));
    assert_eq!(Cookie::from_random(&[32 + 26; 36]).as_str(), "2".repeat(36));
}

#[zcnet_testkit::test]
fn parse_accepts_a_made_cookie() {
    let c = Cookie::from_random(&[99; 36]);
    assert_eq!(Cookie::parse(c.as_bytes()), Ok(c));
    assert_eq!(Cookie::parse(&valid()).map(|c| *c.as_bytes()), Ok(valid()));
}

#[zcnet_testkit::test]
fn parse_rejects_wrong_length() {
    assert_eq!(
        Cookie::parse(&valid()[..36]),
        Err(ProtoError::BadCookie("not 37 bytes"))
    );
    let mut long = valid().to_vec();
    long.push(0);
    assert!(Cookie::parse(&long).is_err());
    assert!(Cookie::parse(&[]).is_err());
}

#[zcnet_testkit::test]
fn parse_rejects_missing_nul() {
    let mut b = valid();
    b[36] = b'a';
    assert_eq!(
        Cookie::parse(&b),
        Err(ProtoError::BadCookie("no NUL at byte 37"))
    );
}

#[zcnet_testkit::test]
fn parse_rejects_characters_outside_the_alphabet() {
    for bad in [b'A', b'1', b'8', b'-', 0, b' ', 0xff] {
        let mut b = valid();
        b[5] = bad;
        assert!(
            matches!(Cookie::parse(&b), Err(ProtoError::BadCookie(_))),
            "{bad}"
        );
    }
    let http = b"GET / HTTP/1.1\r\nHost: example\r\n\r\n\0\0\0\0";
    assert!(Cookie::parse(&http[..37]).is_err());
}

#[zcnet_testkit::test]
fn matches_only_the_same_bytes() {
    let c = Cookie::from_random(&[5; 36]);
    assert!(c.matches(c.as_bytes()));
    let other = Cookie::from_random(&[6; 36]);
    assert!(!c.matches(other.as_bytes()));
    assert!(!c.matches(&c.as_bytes()[..36]));
    assert_eq!(format!("{c:?}"), format!("Cookie({})", c.as_str()));
}
