//! Trying a tool: a form generated from the signature, the call through
//! the core (once per form), its answer; and the page of a call that waits
//! for its end user.

use super::*;

/// `GET`/`POST catalog/tools/{id}/try`.
#[derive(Template)]
#[template(path = "pages/catalog_try.html")]
struct TryPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    name: String,
    description: String,
    action: String,
    form_token: String,
    /// This form's call id: new on every page, so each form sent is one call.
    call_id: String,
    /// On the answer to a form sent again: how many hours its answer is kept.
    resent: Option<u64>,
    versions: Vec<u32>,
    version: u32,
    current: u32,
    problem: Option<Vec<(bool, String)>>,
    fields: Vec<FieldView>,
    private: Vec<String>,
    end_user: Option<EndUserField>,
    answer: Option<Answer>,
}

/// How a field is entered.
enum Control {
    /// A one-line text box.
    Line,
    /// A multi-line text box.
    Text,
    /// A whole number between two bounds.
    Number(String, String),
    /// One of a list (an enum's values, or true/false).
    Choice(Vec<String>),
}

/// One input of the form.
struct FieldView {
    name: String,
    required: bool,
    hint: String,
    description: String,
    values: Vec<(String, String)>,
    control: Control,
    /// What was entered (kept when the form comes back with errors).
    value: String,
    /// Why the core refused it.
    error: Option<Vec<(bool, String)>>,
}

/// The end user a call is made for, when it may need confirmation.
struct EndUserField {
    hint: String,
    value: String,
    error: Option<Vec<(bool, String)>>,
}

/// What came of a call; kept as JSON in the call ledger, to answer the
/// same form sent again.
#[derive(Clone, Serialize, Deserialize)]
enum Answer {
    /// The tool's outputs: `(name, value as JSON)`.
    Outputs { outputs: Vec<(String, String)> },
    /// Refused, or failed: the status, code and message the A2T door would
    /// answer, and the fields an agent could act on.
    Refused { status: u16, code: String, message: Vec<(bool, String)>, details: Vec<(String, String)> },
    /// Waiting for its end user's confirmation.
    Pending { end_user: String, expires: String, confirm_href: Option<String>, pack: String, status_href: String },
    /// A waiting call's state, not yet answered.
    Waiting { state: String, expires: String },
    /// The kept answer of a call made through another door, in that door's
    /// shape: its status and JSON.
    Kept { status: u16, json: String },
}

impl Answer {
    fn refused(error: &ApiError) -> Answer {
        let details = error
            .fields()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect();
        Answer::Refused {
            status: error.status().as_u16(),
            code: error.code().to_string(),
            message: rich(error.message()),
            details,
        }
    }
}

/// Bytes of JSON a page shows of one value (and the call ledger keeps of
/// a try form's answer); past it the value is cut, and says so.
pub(super) const SHOWN_JSON_BYTES: usize = 64 * 1024;

/// `value` as a page shows it: indented when that fits in
/// [`SHOWN_JSON_BYTES`], else compact — indentation grows with nesting, so
/// a deep value indented can be many times its own size — and cut there
/// with a note. Never more work than that many bytes of output.
pub(super) fn shown_json(value: &Value) -> String {
    /// A writer that refuses what goes past its room.
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + bytes.len() > SHOWN_JSON_BYTES {
                return Err(std::io::ErrorKind::OutOfMemory.into());
            }
            self.0.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    if serde_json::to_writer_pretty(&mut out, value).is_ok() {
        return String::from_utf8(out.0).unwrap_or_default();
    }
    let mut out = Bounded(Vec::new());
    if serde_json::to_writer(&mut out, value).is_ok() {
        return String::from_utf8(out.0).unwrap_or_default();
    }
    // Full: what was written, cut at a character boundary.
    let text = String::from_utf8_lossy(&out.0);
    let text = text.trim_end_matches(char::REPLACEMENT_CHARACTER);
    format!("{text}… (shown in part: the first {} KiB)", SHOWN_JSON_BYTES / 1024)
}

/// The form of `version`, with what was entered and the core's errors.
fn try_page(
    host: &AppState,
    options: &ApiOptions,
    session: &DesignerSession,
    tool: &Tool,
    version: &ToolVersion,
    entered: &HashMap<String, String>,
    errors: &HashMap<String, String>,
) -> TryPage {
    let links = Links::new(options, &session.tenant);
    let signature = &version.signature;
    let fields = signature
        .inputs
        .iter()
        .filter(|p| !p.private)
        .map(|p| {
            let (kind, constraint) = input_kind(p);
            let (control, values) = match &p.ty {
                InputType::String { max_length: Some(max) } if *max <= ONE_LINE_CHARS => (Control::Line, Vec::new()),
                InputType::String { .. } => (Control::Text, Vec::new()),
                InputType::Int { min, max, .. } => (Control::Number(min.to_string(), max.to_string()), Vec::new()),
                InputType::Boolean => (Control::Choice(vec!["true".into(), "false".into()]), Vec::new()),
                InputType::Enum { values } => {
                    (Control::Choice(values.iter().map(|v| v.name.clone()).collect()), enum_values(values))
                }
            };
            FieldView {
                name: p.name.clone(),
                required: p.required,
                hint: match constraint {
                    Some(c) => format!("{kind}, {c}"),
                    None => kind,
                },
                description: p.description.clone(),
                values,
                control,
                value: entered.get(&p.name).cloned().unwrap_or_default(),
                error: errors.get(&p.name).map(|e| rich(e)),
            }
        })
        .collect();
    let need = host.confirmation_need(tool, version);
    let end_user = (need != ConfirmationNeed::Never).then(|| EndUserField {
        hint: match need {
            ConfirmationNeed::Always => "Every call of this tool waits for its end user's confirmation: name who confirms it (an end user of this tenant's confirmation server).".into(),
            _ => "Some calls of this tool wait for their end user's confirmation: name who would confirm this one.".into(),
        },
        value: entered.get(END_USER_FIELD).cloned().unwrap_or_default(),
        error: errors.get(END_USER_FIELD).map(|e| rich(e)),
    });
    let mut versions: Vec<u32> =
        tool.versions_before(None, usize::MAX).iter().filter(|v| v.retired_at().is_none()).map(|v| v.number).collect();
    versions.reverse();
    TryPage {
        frame: frame(options, &links, format!("Try {}", tool.name), Some(session)),
        crumbs: vec![
            ("Catalog".into(), Some(links.home())),
            (tool.name.clone(), Some(links.version(tool, version.number))),
            ("Try it".into(), None),
        ],
        name: tool.name.clone(),
        description: signature.description.clone(),
        action: links.try_it(tool),
        form_token: session.form_token.clone(),
        call_id: pages::new_form_id(),
        resent: None,
        versions,
        version: version.number,
        current: tool.current().map_or(0, |v| v.number),
        problem: errors.get("").map(|e| rich(e)),
        fields,
        private: signature.inputs.iter().filter(|p| p.private).map(|p| p.name.clone()).collect(),
        end_user,
        answer: None,
    }
}

/// The form's field for the end user (apart from the tool's inputs,
/// which are `input.{name}`).
const END_USER_FIELD: &str = "end_user";

/// The live version a form names (the current one by default).
fn live_version(tool: &Arc<Tool>, n: Option<&str>) -> Result<(Arc<Tool>, Arc<ToolVersion>), Unavailable> {
    let number = match n {
        Some(n) => Some(n.parse::<u32>().map_err(|_| Unavailable::Version(tool.name.clone()))?),
        None => None,
    };
    ToolHost::version_of(tool.clone(), number).map_err(|e| Unavailable::Refused(ApiError::from(e)))
}

/// `GET catalog/tools/{id}/try[?version=N]`: the form.
#[utoipa::path(get, summary = "A form to try a tool", description = "A form generated from a live version's signature.", path = "/catalog/tools/{tool_id}/try", tag = "Catalog", operation_id = "catalog_try_form",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"), ("version" = Option<String>, Query, description = "The version (the current one by default)")),
    responses(
        (status = 200, description = "The form", content_type = "text/html", body = String),
        (status = 404, description = "No such tool or version", content_type = "text/html", body = String),
        (status = 410, description = "The version is retired", content_type = "text/html", body = String),
    ))]
pub(in crate::api) async fn try_form(about: AboutTool) -> Response {
    let AboutTool { host, options, session, tool, query } = about;
    let (tool, version) = match live_version(&tool, field(&query, "version")) {
        Ok(found) => found,
        Err(why) => return why.page(&options, &session),
    };
    let page = try_page(&host, &options, &session, &tool, &version, &HashMap::new(), &HashMap::new());
    pages::page(StatusCode::OK, &page)
}

/// A form value as the JSON the signature asks for. A whole number that
/// does not parse stays text, so that the core's validation names the
/// parameter and what it takes.
pub(super) fn typed(param: &InputParam, text: &str) -> Value {
    match &param.ty {
        InputType::Int { .. } => {
            let trimmed = text.trim();
            trimmed
                .parse::<i64>()
                .map(Value::from)
                .or_else(|_| trimmed.parse::<u64>().map(Value::from))
                .unwrap_or_else(|_| Value::String(text.to_string()))
        }
        InputType::Boolean => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::String(text.to_string()),
        },
        InputType::String { .. } | InputType::Enum { .. } => Value::String(text.to_string()),
    }
}

/// `POST catalog/tools/{id}/try`: validates the form against the signature
/// (the core's [`crate::host::ToolHost::check_input`]: every bad field is named next
/// to it) and runs the call through the core.
#[utoipa::path(post, summary = "Tries a tool", description = "Checks the form against the signature (each bad field refused where it is) and runs the call through the core, as an A2T call: the tenant's quotas, the tool's limits and its confirmation policy apply. The page's status is the call's. The form's `call_id` makes it one call: the same form sent again (a reload) is answered from the record of its first call, marked `idempotent-replayed: true`, and the tool does not run again.", path = "/catalog/tools/{tool_id}/try", tag = "Catalog", operation_id = "catalog_try",
    params(("tool_id" = String, Path, description = "The tool's `toolId`")),
    request_body(content = schemas::TryForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "It ran: its outputs (or, for the form sent again, its first call's)", content_type = "text/html", body = String,
            headers(("idempotent-replayed" = Option<String>, description = "`true` when the answer is the recorded one of this form's first call"))),
        (status = 202, description = "It waits for its end user's confirmation: the URI pack and the links on", content_type = "text/html", body = String,
            headers(("idempotent-replayed" = Option<String>, description = "`true` when the answer is the recorded one of this form's first call"))),
        (status = 400, description = "The form has no call id (`invalid_request`): nothing ran", content_type = "text/html", body = String),
        (status = 404, description = "No such tool or version", content_type = "text/html", body = String),
        (status = 409, description = "The form's call id was sent before with other values (`call_id_reused`): nothing ran", content_type = "text/html", body = String),
        (status = 410, description = "The version is retired", content_type = "text/html", body = String),
        (status = 422, description = "A field is refused (at the field), the tool failed for good, or the form's first call has no answer to show (`call_outcome_unknown`: not run again)", content_type = "text/html", body = String),
        (status = 503, description = "Busy, over the tenant's rate, the tool asks for a retry, the call cannot be recorded (`storage_failed`), or the form's first call still runs on another replica (`call_in_progress`)", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 504, description = "The tool did not answer in time", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(in crate::api) async fn try_call(about: AboutTool, body: Bytes) -> Response {
    let AboutTool { host, options, session, tool, .. } = about;
    let form = form(&body);
    let (tool, version) = match live_version(&tool, field(&form, "version")) {
        Ok(found) => found,
        Err(why) => return why.page(&options, &session),
    };
    let signature = &version.signature;
    let mut entered = HashMap::new();
    let mut given = Vec::new();
    for param in signature.inputs.iter().filter(|p| !p.private) {
        let text = field(&form, &format!("input.{}", param.name)).unwrap_or("");
        entered.insert(param.name.clone(), text.to_string());
        // An empty field is a value left out.
        if !text.is_empty() {
            given.push((param.name.as_str(), typed(param, text)));
        }
    }
    let mut errors = HashMap::new();
    let end_user = field(&form, END_USER_FIELD).map(str::trim).filter(|u| !u.is_empty()).map(str::to_string);
    if let Some(user) = &end_user {
        entered.insert(END_USER_FIELD.to_string(), user.clone());
        if let Err(e) = crate::api::links::check_end_user(user) {
            errors.insert(END_USER_FIELD.to_string(), e.message().to_string());
        }
    }
    let arguments: Vec<(&str, &Value)> = given.iter().map(|(name, value)| (*name, value)).collect();
    let input = match host.check_input(&tool, &version, FrontDoor::A2t, None, &arguments) {
        Ok(input) if errors.is_empty() => Some(input),
        Ok(_) => None,
        Err(refused) => {
            for e in refused {
                errors.entry(e.parameter.clone().unwrap_or_default()).or_insert(e.message);
            }
            None
        }
    };
    let Some(input) = input else {
        let page = try_page(&host, &options, &session, &tool, &version, &entered, &errors);
        return ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", "the form has errors")
            .onto(pages::page(StatusCode::UNPROCESSABLE_ENTITY, &page));
    };
    // The form's call id makes it one call: the same form sent again (a
    // reload, back and send again, a second click) is answered from the
    // ledger's record of the first, and the tool does not run again.
    let show =
        |errors: &HashMap<String, String>| try_page(&host, &options, &session, &tool, &version, &entered, errors);
    let Some(form_call_id) = field(&form, CALL_ID_FIELD).filter(|id| pages::is_form_id(id)) else {
        let mut page = show(&errors);
        page.problem = Some(rich(
            "This form has no call id (it did not come from this page): nothing ran. Send it again from here.",
        ));
        return ApiError::bad_request("invalid_request", "the form has no call id")
            .onto(pages::page(StatusCode::BAD_REQUEST, &page));
    };
    let key = CallKey {
        tenant: session.tenant.clone(),
        caller: session.principal.key_id.clone(),
        // Apart from the OTC door's call ids, which its callers choose.
        call_id: format!("catalog:{form_call_id}"),
    };
    let retention_hours = host.call_retention().as_secs() / 3600;
    // The answer to the form sent again; `kept` when it is the first
    // call's answer (not that it has none to show).
    let resent = |answer: Answer, status: StatusCode, kept: bool| {
        let mut page = show(&errors);
        page.answer = Some(answer);
        page.resent = kept.then_some(retention_hours);
        let mut response = pages::page(status, &page);
        response.headers_mut().insert("idempotent-replayed", axum::http::HeaderValue::from_static("true"));
        response
    };
    let mut call = Call::new(input, FrontDoor::A2t);
    call.call_id = key.call_id.clone();
    call.end_user = end_user;
    let answered = |came: Came| match came {
        Came::AtField(name, message) => {
            let mut errors = errors.clone();
            errors.entry(name).or_insert(message);
            pages::page(StatusCode::UNPROCESSABLE_ENTITY, &show(&errors))
        }
        Came::Answer { status, answer, refusal } => {
            let mut page = show(&errors);
            page.answer = Some(answer);
            match refusal {
                Some(error) => error.onto(pages::page(status, &page)),
                None => pages::page(status, &page),
            }
        }
    };
    // The tenant's rate first: a call over it is refused before its claim
    // is written (and released: two writes for a call that never runs).
    match host.take_rate(&tool, &version, &call) {
        Ok(taken) => call.rate = Some(taken),
        Err(refused) => return answered(came_of(&options, &session, call.end_user.clone(), Err(refused))),
    }
    let ticket = match host.claim_call(&key, &form_sha256(tool.id, &form)).await {
        Ok(Claim::Run(ticket)) => ticket,
        Ok(Claim::Recorded(kept)) => {
            let kept = serde_json::from_str::<KeptAnswer>(&kept).ok();
            return match kept {
                // Final: what was temporary then is not retried by a reload.
                Some(KeptAnswer { status, answer }) => {
                    let status = crate::api::error::settled(StatusCode::from_u16(status).unwrap_or(StatusCode::OK));
                    resent(answer, status, true)
                }
                None => {
                    let error = outcome_unknown("This form's call ran before, but its answer cannot be shown again.");
                    resent(Answer::refused(&error), error.status(), false)
                }
            };
        }
        Ok(Claim::Unfinished) => {
            let error = outcome_unknown(
                "This form's call began, but its outcome was never recorded (the server stopped while it ran): it may or may not have taken effect.",
            );
            return resent(Answer::refused(&error), error.status(), false);
        }
        Ok(Claim::RunningElsewhere) => {
            let error = ApiError::call_in_progress(
                "This form's call still runs (on another replica of the server): reload this page in a moment to see its answer.",
            );
            return resent(Answer::refused(&error), error.status(), false);
        }
        Ok(Claim::Conflict) => {
            let mut page = show(&errors);
            page.problem = Some(rich(
                "This form was already sent with other values: nothing ran now. Check the values and send the form again.",
            ));
            return ApiError::new(StatusCode::CONFLICT, "call_id_reused", "the form was sent before with other values")
                .onto(pages::page(StatusCode::CONFLICT, &page));
        }
        Err(e) => {
            tracing::error!(tenant = session.tenant, error = %e, "a catalog call id could not be claimed");
            let error = ApiError::storage_failed("the call could not be recorded; it did not run");
            let mut page = show(&errors);
            page.answer = Some(Answer::refused(&error));
            return error.onto(pages::page(StatusCode::SERVICE_UNAVAILABLE, &page));
        }
    };
    // Its own task: a browser that goes away mid-call must not leave the
    // call id claimed and unrecorded while the tool runs on.
    let run = run_once(host.clone(), options.clone(), session.clone(), tool.clone(), version.clone(), call, ticket);
    let Ok(came) = tokio::spawn(tracing::Instrument::instrument(run, tracing::Span::current())).await else {
        let error = ApiError::internal("the call was interrupted");
        let mut page = show(&errors);
        page.answer = Some(Answer::refused(&error));
        return error.onto(pages::page(StatusCode::INTERNAL_SERVER_ERROR, &page));
    };
    answered(came)
}

/// The form's field with its call id.
const CALL_ID_FIELD: &str = "call_id";

/// What identifies a try form's request in the ledger: the tool and every
/// field but the tokens, in order. The same form sent again hashes the
/// same; the same call id with other values is a conflict.
pub(super) fn form_sha256(tool_id: uuid::Uuid, form: &[(String, String)]) -> String {
    let mut fields: Vec<&(String, String)> =
        form.iter().filter(|(name, _)| name != "form_token" && name != CALL_ID_FIELD).collect();
    fields.sort();
    let request = serde_json::json!({ "catalog_try": tool_id.to_string(), "fields": fields });
    crate::digest::sha256_hex(request.to_string().as_bytes())
}

/// `422 call_outcome_unknown`: a form sent again whose first call's answer
/// cannot be shown; it is not run again.
fn outcome_unknown(said: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "call_outcome_unknown",
        format!("{said} It was not run again; check before calling again."),
    )
}

/// A call's answer as the ledger keeps it for its form.
#[derive(Serialize, Deserialize)]
struct KeptAnswer {
    /// The page's status.
    status: u16,
    answer: Answer,
}

/// What came of a call the catalog ran.
enum Came {
    /// Its answer: what the tool gave, a refusal, or that it waits.
    Answer { status: StatusCode, answer: Answer, refusal: Option<ApiError> },
    /// A field the core refused as the call was made (named, and why): the
    /// tool did not run.
    AtField(String, String),
}

/// Runs a claimed call through the core and settles its claim: the answer
/// kept for the form sent again when the tool ran (or may have) or the call
/// now waits for its end user (a second post must not open a second
/// transaction); the call id given back when it was refused before it ran.
async fn run_once(
    host: AppState,
    options: Arc<ApiOptions>,
    session: DesignerSession,
    tool: Arc<Tool>,
    version: Arc<ToolVersion>,
    call: Call,
    ticket: crate::idempotency::Ticket,
) -> Came {
    let (call_id, end_user, number) = (call.call_id.clone(), call.end_user.clone(), version.number);
    let outcome = host.invoke(tool.clone(), version, call).await;
    tracing::info!(
        tenant = session.tenant,
        key = session.principal.key_id,
        tool = tool.name,
        version = number,
        call_id,
        "a call was tried from the catalog"
    );
    let keep = match &outcome {
        Ok(_) | Err(InvokeError::ConfirmationPending(_)) => true,
        Err(e) => e.tool_ran(),
    };
    let came = came_of(&options, &session, end_user, outcome);
    let kept = match &came {
        Came::Answer { status, answer, .. } if keep => {
            serde_json::to_string(&KeptAnswer { status: status.as_u16(), answer: answer.clone() }).ok()
        }
        _ => None,
    };
    let settled = match (keep, kept) {
        (true, Some(kept)) => host.settle_call(ticket, Some(&kept)),
        (false, _) => host.settle_call(ticket, None),
        // Not recordable: left unfinished, so a resubmission says the
        // outcome is unknown rather than run it again.
        (true, None) => {
            drop(ticket);
            Ok(())
        }
    };
    if let Err(e) = settled {
        // The page still shows the answer; the form sent again is told its
        // outcome is unknown rather than run again.
        tracing::error!(error = %e, "a catalog call's answer could not be recorded");
    }
    came
}

/// The page's answer to a call's typed outcome.
fn came_of(
    options: &ApiOptions,
    session: &DesignerSession,
    end_user: Option<String>,
    outcome: Result<ToolResult, InvokeError>,
) -> Came {
    let refused = |error: ApiError| Came::Answer {
        status: error.status(),
        answer: Answer::refused(&error),
        refusal: Some(error),
    };
    match outcome {
        Ok(ToolResult::Outputs(outputs)) => {
            let outputs = outputs.iter().map(|o| (o.name.clone(), shown_json(&o.value))).collect();
            Came::Answer { status: StatusCode::OK, answer: Answer::Outputs { outputs }, refusal: None }
        }
        Ok(ToolResult::Failed(failed)) => refused(ApiError::from(failed)),
        Err(InvokeError::ConfirmationPending(pending)) => {
            let links = Links::new(options, &session.tenant);
            let pack = crate::api::links::uri_pack_body(options, &pending);
            // A link to the built-in confirmation page only: an external
            // confirmation server takes the pack its own way.
            let confirm_href =
                pending.confirmation_uri.is_none().then(|| crate::api::links::confirmation_link(options, &pending));
            let answer = Answer::Pending {
                end_user: end_user.unwrap_or_default(),
                expires: at(pending.expires_at),
                confirm_href,
                pack: shown_json(&pack),
                status_href: links.confirmation(&pending.id),
            };
            Came::Answer { status: StatusCode::ACCEPTED, answer, refusal: None }
        }
        Err(InvokeError::Input(e)) => Came::AtField(e.parameter.unwrap_or_default(), e.message),
        Err(InvokeError::EndUserRequired(_)) => Came::AtField(
            END_USER_FIELD.to_string(),
            "This call needs its end user's confirmation: name the end user who confirms it.".to_string(),
        ),
        Err(InvokeError::AccountEndUserRequired(_)) => Came::AtField(
            END_USER_FIELD.to_string(),
            "This tool acts with its end user's own account: name the end user the call is made for.".to_string(),
        ),
        Err(InvokeError::UnknownEndUser { .. }) => Came::AtField(
            END_USER_FIELD.to_string(),
            "This is not one of the tenant's end users, so nobody could confirm the call: name one of them."
                .to_string(),
        ),
        Err(e) => refused(ApiError::from(e)),
    }
}

// A call that waits for its end user.

/// `GET catalog/confirmations/{id}`.
#[derive(Template)]
#[template(path = "pages/catalog_confirmation.html")]
struct ConfirmationStatusPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    tool: String,
    tool_href: String,
    version: u32,
    end_user: String,
    created: String,
    answer: Answer,
}

/// The state of a call made for an end user, and once it ran, its answer
/// (as the result URI gives it, to a consumer key of the tenant: a catalog
/// session is one).
#[utoipa::path(get, summary = "A call waiting for its end user", description = "Its state and, once it ran, its answer (what its result URI gives).", path = "/catalog/confirmations/{id}", tag = "Catalog", operation_id = "catalog_confirmation",
    params(("id" = String, Path, description = "The transaction id")),
    responses(
        (status = 200, description = "The call", content_type = "text/html", body = String),
        (status = 404, description = "No such call", content_type = "text/html", body = String),
        (status = 503, description = "It could not be read", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(in crate::api) async fn confirmation(
    State(host): State<AppState>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Extension(session): Extension<DesignerSession>,
    Path(id): Path<String>,
) -> Response {
    let links = Links::new(&options, &session.tenant);
    let c = match host.confirmation(&session.tenant, &id) {
        Ok(Some(c)) => c,
        Ok(None) => {
            let said = Paragraph::of("There is no such call waiting for confirmation.").id("problem");
            return notice(&options, &links, Some(&session), StatusCode::NOT_FOUND, "No such call", vec![said]);
        }
        Err(e) => {
            tracing::warn!(tenant = session.tenant, error = %e, "a CHEQ transaction could not be read");
            let said = Paragraph::of("The call could not be read now; try again in a moment.").id("problem");
            return ApiError::storage_failed("the call could not be read").onto(notice(
                &options,
                &links,
                Some(&session),
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                vec![said],
            ));
        }
    };
    let state = TxState::of(&c, unix_now());
    let answer = match state {
        TxState::Pending => {
            Answer::Waiting { state: "It waits for its end user's confirmation".into(), expires: at(c.expires_at) }
        }
        TxState::Running => {
            Answer::Waiting { state: "It was confirmed and runs now".into(), expires: at(c.expires_at) }
        }
        // What the result URI gives, as its door keeps it: not read back
        // into outputs (the catalog does not parse a door's answers).
        TxState::Done => {
            let status = c.result_status.unwrap_or(200);
            let body = c.result_body.as_deref().unwrap_or_default();
            let json = serde_json::from_str::<Value>(body)
                .map_or_else(|_| shown_json(&Value::String(body.to_string())), |json| shown_json(&json));
            Answer::Kept { status, json }
        }
        other => Answer::refused(&ApiError::unanswered(other)),
    };
    let tool = host.registry().get_in(&session.tenant, &c.tool_id);
    let (name, href) = match &tool {
        Some(tool) => (tool.name.clone(), links.version(tool, c.version)),
        None => (c.tool_id.to_string(), links.home()),
    };
    let page = ConfirmationStatusPage {
        frame: frame(&options, &links, "A call waiting for confirmation", Some(&session)),
        crumbs: vec![("Catalog".into(), Some(links.home())), (name.clone(), Some(href.clone())), ("Call".into(), None)],
        tool: name,
        tool_href: href,
        version: c.version,
        end_user: c.end_user.clone(),
        created: at(c.created_at),
        answer,
    };
    pages::page(StatusCode::OK, &page)
}
