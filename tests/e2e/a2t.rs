//! The A2T endpoints: enumeration, pagination, tags, invocation and every
//! refusal, against the three example tools.

use crate::support::{Server, invocation, outputs};
use serde_json::{Value, json};

fn names(body: &Value) -> Vec<String> {
    body["items"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn health_answers_anyone_and_tells_nothing_about_tenants() {
    let server = Server::start(&[]);
    let (status, body) = server.call_as(None, reqwest::Method::GET, "/health", None).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ok"}));
    // A single node is ready once it has started (it answers after loading).
    let (status, body) = server.call_as(None, reqwest::Method::GET, "/ready", None).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ready"}));
    // OTC's health, under the bare root, an existing tenant's root and a
    // made-up tenant's: byte for byte the same answer.
    server.create_tenant("acme", json!({})).await;
    let mut answers = Vec::new();
    for path in ["/otc/health", "/t/default/otc/health", "/t/acme/otc/health", "/t/nobody-here/otc/health"] {
        let response = reqwest::get(format!("{}{path}", server.base)).await.unwrap();
        let status = response.status().as_u16();
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
        answers.push((path, status, content_type, response.text().await.unwrap()));
    }
    assert_eq!(answers[0].1, 200, "{answers:?}");
    for answer in &answers[1..] {
        assert_eq!((answer.1, &answer.2, &answer.3), (answers[0].1, &answers[0].2, &answers[0].3), "{answers:?}");
    }
}

#[tokio::test]
async fn enumeration_lists_the_latest_version_of_each_tool() {
    let server = Server::start(&[]);
    let (status, body) = server.get("/tools").await;
    assert_eq!(status, 200);
    assert_eq!(names(&body), ["book_flight", "echo", "lookup_weather_by_city"]);
    assert_eq!(body["paging"], json!({"pageLimit": 50}));
    for tool in body["items"].as_array().unwrap() {
        assert_eq!(tool["version"], 1);
        assert_eq!(tool["currentVersion"], 1);
        let id = tool["toolId"].as_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    }

    let book = &body["items"][0];
    assert_eq!(
        book["description"],
        "Books seats on a scheduled flight and returns the booking's confirmation code and total price. \
         Call it only once the traveller has chosen the flight number, the date, the number of passengers and the cabin class."
    );
    assert_eq!(book["tags"], json!(["travel", "bookings"]));
    let inputs = &book["input_parameters"];
    assert_eq!(
        inputs[0],
        json!({
            "id": "flight_number", "name": "flight_number", "type": "string",
            "description": "The flight number: the airline's two-character code then one to four digits, for example UA123.",
            "required": true, "maxLength": 6
        })
    );
    assert_eq!(inputs[2]["type"], "int");
    assert_eq!((inputs[2]["min"].clone(), inputs[2]["max"].clone()), (json!(1), json!(9)));
    assert_eq!(inputs[3]["type"], "enum");
    assert_eq!(
        inputs[3]["allowed-values"][1],
        json!({"name": "PREMIUM_ECONOMY", "description": "Premium economy class, the second seat tier. More legroom."})
    );
    let outputs: Vec<(&str, &str)> = book["output_parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["name"].as_str().unwrap(), o["type"].as_str().unwrap()))
        .collect();
    assert_eq!(outputs, [("confirmation_code", "string"), ("total_price_usd", "int"), ("cabin_class", "enum")]);

    let weather = &body["items"][2];
    let units = &weather["input_parameters"][1];
    assert_eq!(units["required"], false);
    assert_eq!(units["type"], "enum");
    let coordinates =
        weather["output_parameters"].as_array().unwrap().iter().find(|o| o["name"] == "coordinates").unwrap();
    assert_eq!(coordinates["type"], "json");
}

#[tokio::test]
async fn pagination_walks_every_page() {
    let server = Server::start(&[]);
    let mut seen = Vec::new();
    let mut path = "/tools?pageLimit=1".to_string();
    let mut pages = 0;
    loop {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 200);
        assert_eq!(body["paging"]["pageLimit"], 1);
        assert_eq!(body["items"].as_array().unwrap().len(), 1);
        seen.extend(names(&body));
        pages += 1;
        match body["paging"]["next"].as_str() {
            Some(next) => path = format!("/tools?pageLimit=1&pageCursor={next}"),
            None => break,
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(seen, ["book_flight", "echo", "lookup_weather_by_city"]);

    let (_, body) = server.get("/tools?pageLimit=2").await;
    assert_eq!(names(&body), ["book_flight", "echo"]);
    let next = body["paging"]["next"].as_str().unwrap().to_string();
    let (_, body) = server.get(&format!("/tools?pageLimit=2&pageCursor={next}")).await;
    assert_eq!(names(&body), ["lookup_weather_by_city"]);
    assert!(body["paging"].get("next").is_none());

    let (status, body) = server.get("/tools?pageLimit=100000").await;
    assert_eq!(status, 200);
    assert_eq!(body["paging"]["pageLimit"], 200, "the server offers at most 200");
}

#[tokio::test]
async fn bad_paging_parameters_are_refused() {
    let server = Server::start(&[]);
    for query in ["pageLimit=0", "pageLimit=-1", "pageLimit=ten"] {
        let (status, body) = server.get(&format!("/tools?{query}")).await;
        assert_eq!(status, 400, "{query}");
        assert_eq!(body["error"]["code"], "invalid_page_limit");
    }
    for cursor in ["%%%", "bm90LWEtY3Vyc29y"] {
        let (status, body) = server.get(&format!("/tools?pageCursor={cursor}")).await;
        assert_eq!(status, 400, "{cursor}");
        assert_eq!(body["error"]["code"], "invalid_cursor");
    }
    // A cursor of the tool listing is not one of a version listing.
    let (_, page) = server.get("/tools?pageLimit=1").await;
    let next = page["paging"]["next"].as_str().unwrap();
    let id = server.tool_id("echo").await;
    let (status, body) = server.get(&format!("/tools/{id}/versions?pageCursor={next}")).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("invalid_cursor")));
}

#[tokio::test]
async fn tags_filter_the_enumeration() {
    let server = Server::start(&[]);
    for (query, expected) in [
        ("tag=travel", vec!["book_flight"]),
        ("tag=travel&tag=bookings", vec!["book_flight"]),
        ("tag=retrievals", vec!["lookup_weather_by_city"]),
        ("tag=travel&tag=weather", vec![]),
        ("tag=unknown", vec![]),
    ] {
        let (status, body) = server.get(&format!("/tools?{query}")).await;
        assert_eq!(status, 200);
        assert_eq!(names(&body), expected, "{query}");
    }
    let (_, body) = server.get("/tools?tag=travel&pageLimit=1").await;
    assert!(body["paging"].get("next").is_none(), "no further travel tools: {body}");
}

#[tokio::test]
async fn a_tool_and_its_versions_are_retrievable_by_id() {
    let server = Server::start(&[]);
    let id = server.tool_id("echo").await;
    let (status, tool) = server.get(&format!("/tools/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(tool["toolId"], id);
    assert_eq!(tool["name"], "echo");
    let (status, versions) = server.get(&format!("/tools/{id}/versions")).await;
    assert_eq!(status, 200);
    assert_eq!(versions["items"], json!([tool.clone()]));
    let (status, v1) = server.get(&format!("/tools/{id}/versions/1")).await;
    assert_eq!((status, v1), (200, tool));

    let unknown = uuid::Uuid::new_v4();
    for path in [
        format!("/tools/{unknown}"),
        "/tools/not-a-uuid".to_string(),
        format!("/tools/{unknown}/versions"),
        format!("/tools/{id}/versions/2"),
        format!("/tools/{id}/versions/0"),
        format!("/tools/{id}/versions/latest"),
        "/no/such/endpoint".to_string(),
    ] {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(body["error"]["code"], "not_found", "{path}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

#[tokio::test]
async fn invocation_runs_the_tool() {
    let server = Server::start(&[]);
    let (status, body) = server.invoke("echo", &[("text", json!("Omaha, Nebraska"))]).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"output_parameters": [{"name": "text", "value": "Omaha, Nebraska"}]}));

    let booking = [
        ("flight_number", json!("UA123")),
        ("date", json!("2026-12-24")),
        ("passengers", json!(2)),
        ("cabin_class", json!("PREMIUM_ECONOMY")),
    ];
    let (status, body) = server.invoke("book_flight", &booking).await;
    assert_eq!(status, 200, "{body}");
    let out = outputs(&body);
    let code = out["confirmation_code"].as_str().unwrap();
    assert_eq!(code.len(), 6);
    assert!(code.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()), "{code}");
    assert_eq!(out["total_price_usd"], 840);
    assert_eq!(out["cabin_class"], "PREMIUM_ECONOMY");
    // Each call gets a fresh instance; the same booking gives the same code.
    let (_, again) = server.invoke("book_flight", &booking).await;
    assert_eq!(outputs(&again)["confirmation_code"], code);

    // Version-pinned invocation.
    let id = server.tool_id("echo").await;
    let (status, body) =
        server.post(&format!("/tools/{id}/versions/1:invoke"), &invocation("echo", &[("text", json!("v1"))])).await;
    assert_eq!((status, outputs(&body)["text"].clone()), (200, json!("v1")));
}

#[tokio::test]
async fn each_invalid_invocation_gets_its_own_400() {
    let server = Server::start(&[]);
    let id = server.tool_id("book_flight").await;
    let path = format!("/tools/{id}:invoke");
    let good = || {
        vec![
            ("flight_number", json!("UA123")),
            ("date", json!("2026-12-24")),
            ("passengers", json!(2)),
            ("cabin_class", json!("ECONOMY")),
        ]
    };
    let with = |name: &'static str, value: Value| {
        let mut params = good();
        params.retain(|(n, _)| *n != name);
        params.push((name, value));
        invocation("book_flight", &params)
    };
    let without = |name: &str| {
        let mut params = good();
        params.retain(|(n, _)| *n != name);
        invocation("book_flight", &params)
    };
    let cases = [
        (invocation("echo", &good()), "wrong_tool_name", None),
        (with("seat", json!("12A")), "unknown_parameter", Some("seat")),
        (without("date"), "missing_parameter", Some("date")),
        (with("passengers", json!("5")), "invalid_type", Some("passengers")),
        (with("passengers", json!(true)), "invalid_type", Some("passengers")),
        (with("passengers", json!(12)), "out_of_range", Some("passengers")),
        (with("passengers", json!(0)), "out_of_range", Some("passengers")),
        (with("flight_number", json!("UA12345")), "too_long", Some("flight_number")),
        (with("cabin_class", json!("LUXURY")), "invalid_enum_value", Some("cabin_class")),
        (with("cabin_class", json!("economy")), "invalid_enum_value", Some("cabin_class")),
        (json!({"input_parameters": []}), "invalid_request", None),
        (json!({"name": "book_flight", "input_parameters": {"passengers": 2}}), "invalid_request", None),
    ];
    for (body, code, parameter) in cases {
        let (status, answer) = server.post(&path, &body).await;
        assert_eq!(status, 400, "{body} → {answer}");
        assert_eq!(answer["error"]["code"], code, "{body} → {answer}");
        assert_eq!(answer["error"]["parameter"].as_str(), parameter, "{answer}");
        assert!(answer["error"]["message"].as_str().is_some_and(|m| m.len() > 10), "{answer}");
    }

    let (_, answer) = server.post(&path, &with("passengers", json!(12))).await;
    assert_eq!(answer["error"]["message"], "parameter `passengers` must be an integer from 1 to 9; got 12");

    let response = server.post_raw(&path, "{not json").await;
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "invalid_json");

    let unknown = uuid::Uuid::new_v4();
    let (status, answer) = server.post(&format!("/tools/{unknown}:invoke"), &good_body()).await;
    assert_eq!((status, answer["error"]["code"].clone()), (404, json!("not_found")));
    let (status, _) = server.post(&format!("/tools/{id}/versions/7:invoke"), &with("passengers", json!(1))).await;
    assert_eq!(status, 404);
    let (status, answer) = server.post(&format!("/tools/{id}"), &with("passengers", json!(1))).await;
    assert_eq!((status, answer["error"]["code"].clone()), (405, json!("method_not_allowed")));
}

fn good_body() -> Value {
    invocation("echo", &[("text", json!("x"))])
}

#[tokio::test]
async fn a_tool_error_is_a_422_with_its_fields() {
    let server = Server::start(&[]);
    let (status, body) = server
        .invoke(
            "book_flight",
            &[
                ("flight_number", json!("UA123")),
                ("date", json!("tomorrow")),
                ("passengers", json!(1)),
                ("cabin_class", json!("FIRST")),
            ],
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"error": {"code": "tool_error", "message": "`tomorrow` is not a date in the form YYYY-MM-DD", "canRetry": false}})
    );

    let (status, body) = server
        .invoke(
            "book_flight",
            &[
                ("flight_number", json!("UA12X")),
                ("date", json!("2026-01-02")),
                ("passengers", json!(1)),
                ("cabin_class", json!("FIRST")),
            ],
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        body["error"]["additionalPromptContent"],
        "A flight number is two letters then digits, like UA123. Ask the traveller for it."
    );
}
