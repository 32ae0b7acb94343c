use super::*;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::json;

fn inputs(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

#[test]
fn a_condition_over_the_inputs_decides_and_fails_closed() {
    let policy = ConfirmationPolicy {
        when: Some("cabin_class in ['BUSINESS', 'FIRST'] || passengers > 4".into()),
        ..Default::default()
    };
    policy.check(&["cabin_class", "passengers", "date"]).unwrap();
    assert!(!policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": 2}))));
    assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "FIRST", "passengers": 1}))));
    assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": 5}))));
    // A type error cannot be settled: ask.
    assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": "many"}))));

    let unknown = policy.check(&["cabin_class"]).unwrap_err().to_string();
    assert!(unknown.contains("names passengers, which is not an input"), "{unknown}");
    let broken = ConfirmationPolicy { when: Some("passengers >".into()), ..Default::default() };
    assert!(broken.check(&["passengers"]).unwrap_err().to_string().contains("not valid CEL"));
    let both = ConfirmationPolicy { required: true, when: Some("true".into()) };
    assert!(both.check(&[]).is_err());
    assert!(ConfirmationPolicy { required: true, when: None }.compile().applies_to(&Map::new()));
    assert!(!ConfirmationPolicy::default().compile().applies_to(&Map::new()));
}

fn when(condition: &str) -> ConfirmationPolicy {
    ConfirmationPolicy { when: Some(condition.into()), ..Default::default() }
}

fn limit_of(condition: &str, inputs: &[&str]) -> Option<&'static str> {
    match when(condition).check(inputs) {
        Err(ConditionError::TooCostly(limit)) => Some(limit.name()),
        Err(other) => panic!("{condition}: refused for another reason: {other}"),
        Ok(()) => None,
    }
}

fn numbers(n: usize) -> String {
    format!("[{}]", (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(","))
}

#[test]
fn a_condition_over_the_budget_is_refused_naming_the_limit() {
    // The reported attack: three nested comprehensions over 300-element literals.
    let list = numbers(300);
    let attack = format!("{list}.all(a,{list}.all(b,{list}.all(c,true)))");
    assert_eq!(limit_of(&attack, &[]), Some("max_chars"));
    let message = when(&attack).check(&[]).unwrap_err().to_string();
    assert!(message.contains("limit `max_chars`") && message.contains("at most 1000"), "{message}");
    // The same, short enough to be read.
    let list = numbers(10);
    assert_eq!(
        limit_of(&format!("{list}.all(a,{list}.all(b,{list}.all(c,true)))"), &[]),
        Some("max_comprehension_depth")
    );
    assert_eq!(limit_of(&numbers(65), &[]), Some("max_literal_entries"));
    assert_eq!(limit_of(&format!("'{}' == 'a'", "x".repeat(300)), &[]), Some("max_string_literal_chars"));
    assert_eq!(limit_of(&format!("{}1{}", "(".repeat(33), ")".repeat(33)), &[]), Some("max_nesting"));
    assert_eq!(limit_of(&vec!["a"; 300].join("+"), &["a"]), Some("max_nodes"));
    assert_eq!(limit_of("a.matches(b)", &["a", "b"]), Some("allowed_functions"));
    assert_eq!(limit_of("a.matches('\\\\w')", &["a"]), Some("max_regex_bytes"));
    assert_eq!(limit_of("l.all(i, i.matches('^[A-Z]{2}'))", &["l"]), Some("max_cost"));
    assert_eq!(limit_of("a.lowerAscii() == 'x'", &["a"]), Some("allowed_functions"));
    assert_eq!(limit_of("optional.of(a).hasValue()", &["a"]), Some("allowed_functions"));
    // Quadratic in the inputs: each comprehension over an input may run 2048 times.
    assert_eq!(limit_of("l.all(a, l.all(b, a == b))", &["l"]), Some("max_cost"));
    assert_eq!(limit_of("l.exists(a, a in l)", &["l"]), Some("max_cost"));
    assert_eq!(limit_of("l.all(a, a.all(b, a == b))", &["l"]), Some("max_cost"));
    assert_eq!(limit_of("l.map(a, l + l).size() > 2", &["l"]), Some("max_cost"));
    // What conditions are for stays well within it.
    for fine in [
        "cabin_class in ['BUSINESS', 'FIRST'] || passengers > 4",
        "items.exists(i, i.amount > 1000)",
        "size(items) > 10 || iban.startsWith('DE') || iban.matches('^[A-Z]{2}[0-9]{2}')",
        "items.filter(i, i.amount > 100).size() > 2",
    ] {
        assert_eq!(limit_of(fine, &["cabin_class", "passengers", "items", "iban"]), None, "{fine}");
    }
    let list = numbers(64);
    assert_eq!(limit_of(&format!("{list}.all(a, {list}.exists(b, a + b == 126))"), &[]), None);
}

#[test]
fn inputs_larger_than_a_condition_may_read_ask_for_confirmation() {
    let policy = when("size(items) > 100");
    policy.check(&["items"]).unwrap();
    let compiled = policy.compile();
    assert!(!compiled.applies_to(&inputs(json!({"items": [1, 2, 3]}))));
    let big: Vec<u32> = (0..2000).collect();
    assert!(compiled.applies_to(&inputs(json!({"items": big}))), "too big to read: fails closed");
    // Inputs it does not read do not count.
    let policy = when("amount > 1000");
    assert!(!policy.compile().applies_to(&inputs(json!({"amount": 5, "memo": "x".repeat(100_000)}))));
}

#[test]
fn a_stored_condition_over_the_budget_asks_every_time() {
    let list = numbers(10);
    let stored = when(&format!("{list}.all(a,{list}.all(b,{list}.all(c,false)))"));
    assert!(matches!(stored.compile(), Confirmation::Always));
}

/// A list of `element(0)`, `element(1)`, … as long as inputs may be:
/// one element more and a condition could not read it.
fn largest(element: impl Fn(usize) -> Value) -> Value {
    let mut list = Vec::new();
    loop {
        list.push(element(list.len()));
        if serde_json::to_string(&list).unwrap().len() > budget::MAX_INPUT_BYTES {
            list.pop();
            return Value::Array(list);
        }
    }
}

/// The heaviest conditions the budget accepts, evaluated over the
/// largest inputs it lets them read: each is accepted, estimated within
/// the budget (and not far below it), and the evaluator answers with the
/// condition's value rather than an error (which would fail closed and
/// hide an evaluation that did not happen). How fast is the benchmark's
/// business (`make bench`), not a test's.
#[test]
fn the_heaviest_accepted_conditions_finish() {
    let list = numbers(64);
    let amounts = largest(|i| json!({ "amount": i }));
    let numbers = largest(|i| json!(i));
    let pairs = largest(|_| json!("ab"));
    let letters = largest(|_| json!("a"));
    for (condition, value, holds) in [
        (format!("{list}.all(a, {list}.all(b, a + b != 1000 && a * b != 5000))"), json!(null), true),
        (
            format!("{list}.all(a, {list}.all(b, a + b != 1000 && a * b != 5000)) || {list}.exists(x, x == 64)"),
            json!(null),
            true,
        ),
        ("items.all(i, i.amount >= 0)".to_string(), amounts, true),
        ("items.all(i, i >= 0)".to_string(), numbers, true),
        ("items.all(i, i != 'x') || items.exists(i, i == 'y')".to_string(), pairs, true),
        (
            "items.all(i, i != 'x' && i != 'y' && i != 'z') || items.exists(i, i == 'w')".to_string(),
            letters.clone(),
            true,
        ),
        ("items.exists(i, i == 'q') || string(size(items)).matches('^[a-z0-9]{8}[0-9a-f]{60}(x|y|z)+$') || 'x'.matches('[a-zA-Z0-9_.+-]+@[a-z0-9-]+(\\\\.[a-z0-9-]+)+')".to_string(), letters, false),
    ] {
        when(&condition).check(&["items"]).unwrap_or_else(|e| panic!("{condition}: {e}"));
        let (program, variables) = compile(&condition).unwrap();
        let cost = budget::check_program(&program).unwrap().cost;
        assert!(
            (budget::MAX_COST / 8..=budget::MAX_COST).contains(&cost),
            "{condition}: estimated at {cost} steps"
        );
        let inputs = inputs(json!({ "items": value }));
        assert_eq!(evaluate(&program, &variables, &inputs), Ok(holds), "{condition}");
    }
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    /// Nested expressions in CEL's syntax, macros and literals included.
    fn expression() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            "[a-z]{0,8}".prop_map(|s| format!("'{s}'")),
            Just("true".to_string()),
            Just("null".to_string()),
            Just("1.5e3".to_string()),
            Just("b'\\xff'".to_string()),
        ];
        leaf.prop_recursive(6, 64, 4, |inner| {
            let operators = prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("{x} + {y}")),
                (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} == {y})")),
                (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, x, y)| format!("{c} ? {x} : {y}")),
                (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("{x} in {y}")),
                prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
                (inner.clone(), inner.clone()).prop_map(|(k, v)| format!("{{{k}: {v}}}")),
            ];
            let macros = prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(l, p)| format!("{l}.all(x, {p})")),
                (inner.clone(), inner.clone()).prop_map(|(l, p)| format!("{l}.exists_one(x, {p})")),
                (inner.clone(), inner.clone()).prop_map(|(l, p)| format!("{l}.map(x, {p})")),
            ];
            let unary = prop_oneof![
                inner.clone().prop_map(|x| format!("!{x}")),
                inner.clone().prop_map(|x| format!("-({x})")),
                inner.clone().prop_map(|x| format!("size({x})")),
                inner.clone().prop_map(|x| format!("{x}.f")),
                inner.clone().prop_map(|x| format!("has({x}.f)")),
                (inner.clone(), inner).prop_map(|(x, i)| format!("{x}[{i}]")),
            ];
            prop_oneof![operators, macros, unary]
        })
    }

    fn checked(text: &str) {
        let policy = when(text);
        // Either answer is fine; a panic or a hang is not.
        let _ = policy.check(&["a", "b"]);
        let compiled = policy.compile();
        let _ = compiled.applies_to(&inputs(json!({"a": [1, "x", {"f": 2}], "b": {"f": [true]}})));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn on_arbitrary_text(text in "\\PC{0,200}") {
            checked(&text);
        }

        #[test]
        fn on_arbitrary_bytes_as_text(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            checked(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn on_text_of_cel_tokens(tokens in prop::collection::vec(
            prop::sample::select(vec!["(", ")", "[", "]", "{", "}", "a", ".", ",", ":", "?", "!", "-", "+",
                "==", "in", "all", "x", "1", "'s'", "\"", "\\", "||", "&&", " ", "has", "size", "u", "b'", "0x", "e"]),
            0..400,
        )) {
            checked(&tokens.concat());
        }

        #[test]
        fn on_nested_expressions(text in expression()) {
            checked(&text);
        }
    }
}

#[test]
fn deep_text_is_refused_before_the_parser_recurses() {
    // On a thread with the stack of an HTTP worker (2 MiB).
    let worker = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
        for depth in [32usize, 33, 200, 499] {
            for (open, close) in [("(", ")"), ("[", "]"), ("{1:", "}"), ("!(", ")"), ("a[", "]")] {
                let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                let checked = when(&text).check(&["a"]);
                if depth > budget::MAX_NESTING && text.chars().count() <= budget::MAX_CHARS {
                    assert_eq!(checked, Err(ConditionError::TooCostly(Limit::Nesting(depth))), "{text}");
                }
            }
        }
        let ternary = vec!["a ? 1"; 120].join(" : ") + " : 2";
        let _ = when(&ternary).check(&["a"]);
        let unary = format!("{}a", "!".repeat(990));
        let _ = when(&unary).check(&["a"]);
        let unary = format!("{}a", "-".repeat(990));
        let _ = when(&unary).check(&["a"]);
        let members = format!("a{}", ".b".repeat(490));
        let _ = when(&members).check(&["a"]);
        let calls = format!("a{}", ".size()".repeat(120));
        let _ = when(&calls).check(&["a"]);
    });
    worker.unwrap().join().unwrap();
}

#[test]
fn hidden_characters_are_shown_as_markers() {
    // An IBAN whose tail is reversed on screen by RIGHT-TO-LEFT OVERRIDE.
    let spoofed = "DE89 3704 0044 \u{202E}3210 5130 02";
    assert_eq!(marked(spoofed).as_deref(), Some("DE89 3704 0044 <U+202E>3210 5130 02"));
    assert_eq!(
        shown(spoofed),
        [Shown::Text("DE89 3704 0044 "), Shown::Hidden('\u{202E}'), Shown::Text("3210 5130 02")]
    );
    for c in [
        '\u{200B}',
        '\u{200C}',
        '\u{200D}',
        '\u{200E}',
        '\u{200F}',
        '\u{202A}',
        '\u{202B}',
        '\u{202C}',
        '\u{202D}',
        '\u{2066}',
        '\u{2067}',
        '\u{2068}',
        '\u{2069}',
        '\u{061C}',
        '\u{FEFF}',
        '\u{00AD}',
        '\u{2060}',
        '\u{2061}',
        '\u{180E}',
        '\u{E0041}',
        '\u{2028}',
        '\u{2029}',
        '\u{00A0}',
        '\u{3000}',
        '\u{0000}',
        '\n',
        '\t',
        '\u{0085}',
        '\u{FE0F}',
        '\u{3164}',
        '\u{F8FF}',
    ] {
        assert!(is_hidden(c), "U+{:04X}", u32::from(c));
        assert_eq!(marked(&format!("a{c}b")), Some(format!("a{}b", marker(c))));
    }
    for c in ['a', ' ', 'é', 'ß', 'א', 'ب', '中', '€', '😀', '0'] {
        assert!(!is_hidden(c), "{c}");
    }
    assert_eq!(marked("DE89 3704 0044 0532 0130 00"), None);
    assert_eq!(shown(""), []);
    assert_eq!(shown("\u{202E}"), [Shown::Hidden('\u{202E}')]);
}

#[test]
fn combining_marks_over_digits_and_latin_are_shown_as_markers() {
    // U+0336 (long stroke overlay) through two digits of an IBAN: on screen
    // `0532` reads as two struck-out digits the user may skip over.
    let struck = "DE89 3704 0044 05\u{0336}3\u{0336}2 0130 00";
    assert_eq!(marked(struck).as_deref(), Some("DE89 3704 0044 05<U+0336>3<U+0336>2 0130 00"));
    assert_eq!(
        shown(struck),
        [
            Shown::Text("DE89 3704 0044 05"),
            Shown::Hidden('\u{0336}'),
            Shown::Text("3"),
            Shown::Hidden('\u{0336}'),
            Shown::Text("2 0130 00"),
        ]
    );
    assert!(has_hidden(struck));
    // Slashes and circles over ASCII, stacked marks, marks after a marker
    // or with nothing before them, and every enclosing mark.
    assert_eq!(marked("1\u{0338}0").as_deref(), Some("1<U+0338>0"));
    assert_eq!(marked("7\u{20E5}").as_deref(), Some("7<U+20E5>"));
    assert_eq!(marked("9\u{0336}\u{0336}").as_deref(), Some("9<U+0336><U+0336>"));
    assert_eq!(marked("a\u{200B}\u{0301}").as_deref(), Some("a<U+200B><U+0301>"));
    assert_eq!(marked("\u{0301}x").as_deref(), Some("<U+0301>x"));
    assert_eq!(marked("\u{0410}\u{20DD}").as_deref(), Some("\u{0410}<U+20DD>"));
    assert_eq!(marked("e\u{0301} €\u{0338}").as_deref(), Some("e<U+0301> €<U+0338>"));
    assert!(is_combining_mark('\u{0336}') && is_combining_mark('\u{20DD}') && !is_combining_mark('0'));
    // Scripts written with combining marks read as they are.
    for text in ["हिन्दी", "עִבְרִית", "مَرْحَبًا", "ภาษาไทย", "Café"] {
        assert_eq!(marked(text), None, "{text}");
    }
}

#[test]
fn signatures_sit_side_by_side_and_catch_every_change() {
    let server = SigningKey::generate().unwrap();
    let confirmer = SigningKey::generate().unwrap();
    let trusted = [jwks(&[&server]), jwks(&[&confirmer])];
    let cheq = json!({"version": 1.0, "operation name": "book_flight", "inputs": {"parameters": []}});

    let mut jws = sign(&cheq, &server, Map::new());
    let mut claims = Map::new();
    claims.insert("sub".into(), "alice".into());
    countersign(&mut jws, &confirmer, claims).unwrap();
    let (payload, signed) = verify(&jws, &trusted).unwrap();
    assert_eq!(payload, canonical(&cheq));
    assert_eq!(signed.len(), 2);
    assert_eq!((signed[1].kid.as_str(), &signed[1].header["sub"]), (confirmer.kid(), &json!("alice")));

    // The payload altered after signing.
    let mut altered = jws.clone();
    let other = json!({"version": 1.0, "operation name": "book_flight", "inputs": {"parameters": [1]}});
    altered["payload"] = B64.encode(canonical(&other)).into();
    assert_eq!(verify(&altered, &trusted).unwrap_err(), VerifyError::BadSignature(server.kid().into()));
    // A claim altered after signing.
    let mut header: Value =
        serde_json::from_slice(&B64.decode(jws["signatures"][1]["protected"].as_str().unwrap()).unwrap()).unwrap();
    header["sub"] = "mallory".into();
    let mut relabeled = jws.clone();
    relabeled["signatures"][1]["protected"] = B64.encode(header.to_string()).into();
    assert_eq!(verify(&relabeled, &trusted).unwrap_err(), VerifyError::BadSignature(confirmer.kid().into()));
    // A signature by a key nobody trusts.
    let forger = SigningKey::generate().unwrap();
    let mut forged = sign(&cheq, &server, Map::new());
    countersign(&mut forged, &forger, Map::new()).unwrap();
    assert_eq!(verify(&forged, &trusted).unwrap_err(), VerifyError::UnknownKey(forger.kid().into()));
    assert!(matches!(verify(&json!({"payload": "e30"}), &trusted), Err(VerifyError::Malformed(_))));
}

#[test]
fn every_jws_serialization_reads_as_the_general_one() {
    let key = SigningKey::generate().unwrap();
    let claims = json!({ "sub": "alice" }).as_object().unwrap().clone();
    let general = sign(&json!({ "operation": "book" }), &key, claims);
    let (payload, s) = (general["payload"].as_str().unwrap(), &general["signatures"][0]);
    let (protected, signature) = (s["protected"].as_str().unwrap(), s["signature"].as_str().unwrap());
    let flattened = json!({ "payload": payload, "protected": protected, "signature": signature });
    let wire = [general.to_string(), format!(" {flattened}\n"), format!("{protected}.{payload}.{signature}\r\n")];
    for body in wire {
        let read = from_wire(body.as_bytes()).unwrap();
        assert_eq!(read, general, "{body}");
        assert!(verify(&read, &[jwks(&[&key])]).is_ok());
    }
    // JSON that is no JWS is left for `verify` to refuse; the rest is not a JWS at all.
    assert_eq!(from_wire(b"{\"payload\": \"e30\"}").unwrap(), json!({ "payload": "e30" }));
    for body in ["yes please", "a.b", "a.b.c.d", "a.b+.c", "{not json", ""] {
        assert!(from_wire(body.as_bytes()).is_err(), "{body}");
    }
}

#[test]
fn the_key_survives_a_restart_and_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let first = SigningKey::load_or_create(dir.path(), KEY_FILE).unwrap();
    let again = SigningKey::load_or_create(dir.path(), KEY_FILE).unwrap();
    assert_eq!(first.kid(), again.kid());
    assert_eq!(first.jwk(), again.jwk());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    std::fs::write(dir.path().join(KEY_FILE), "not a key").unwrap();
    assert!(SigningKey::load_or_create(dir.path(), KEY_FILE).is_err());
}
