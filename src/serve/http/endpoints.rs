//! The handlers of the endpoints (`/v1/push`, `/v1/items`,
//! `/v1/clients/{client_id}`, `/healthz`, `/metrics`), the bearer token
//! checks they share, and the hand-over of their work to the writer.

use super::body::{read_body, Limit, BLOCKING_ABOVE};
use super::budget::{parsed_cost, Refused, ENTRY_COST};
use super::{Answer, Seen, Shared};
use crate::item::NewItem;
use crate::push::receiver::{ItemOutcome, PushOutcome};
use crate::push::wire;
use crate::serve::auth::{self, Grant};
use crate::serve::writer::{Done, Failure, Job, Work};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::Request;
use tokio::sync::oneshot;

/// The request's token, when tokens are configured; its name goes to
/// the access log.
fn authenticate(
    shared: &Shared,
    headers: &HeaderMap,
    seen: &mut Seen,
) -> Result<Option<Grant>, Answer> {
    let Some(tokens) = &shared.tokens else {
        return Ok(None);
    };
    let unauthorized = |m: &str| {
        let mut a = Answer::error(401, m);
        a.challenge = true;
        a
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized(
            "missing bearer token (send Authorization: Bearer TOKEN)",
        ));
    };
    let Some(token) = auth::bearer(value.as_bytes()) else {
        return Err(unauthorized(
            "the Authorization header is not a bearer token (send Authorization: Bearer TOKEN)",
        ));
    };
    match tokens.authenticate(token) {
        Some(g) => {
            seen.token = Some(tokens.name(g).to_string());
            Ok(Some(g))
        }
        None => Err(unauthorized("invalid bearer token")),
    }
}

/// 403 unless the token may act as `client`.
fn authorize(shared: &Shared, grant: Option<Grant>, client: &str) -> Result<(), Answer> {
    match (&shared.tokens, grant) {
        (Some(tokens), Some(g)) if !tokens.may_act_as(g, client) => Err(Answer::error(
            403,
            format!("this token may not act as client {client}"),
        )),
        _ => Ok(()),
    }
}

/// Hand `work` to the writer and wait for the commit.
async fn submit(shared: &Shared, work: Work, weight: usize) -> Result<Done, Answer> {
    let (reply, answer) = oneshot::channel();
    if shared
        .jobs
        .send(Job::Write {
            work,
            weight,
            reply,
        })
        .await
        .is_err()
    {
        return Err(Answer::error(503, "the server is shutting down; retry later").retry());
    }
    match answer.await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(f)) => Err(failed(f)),
        Err(_) => Err(Answer::error(
            500,
            "the request was not processed; see the server's log",
        )),
    }
}

fn failed(f: Failure) -> Answer {
    if f.temporary {
        Answer::error(503, "the receiving spool is busy; retry later").retry()
    } else {
        Answer::error(
            500,
            "the receiving spool could not store the request; see the server's log",
        )
    }
}

pub(super) async fn push(
    shared: &Shared,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers(), seen)?;
    let limit = Limit {
        bytes: shared.max_body,
        what: "request body",
        flag: "--max-body",
    };
    let body = read_body(shared, req, &limit, seen).await?;
    let weight = body.len();
    // Before parsing, hold what the parsed request may take: its strings
    // are no longer than the body, and each entry (one "seq" apiece)
    // costs at most ENTRY_COST beside them.
    let entries = memchr::memmem::find_iter(&body, b"\"seq\"").count();
    seen.reservation(shared)
        .take(
            body.len()
                .saturating_add(entries.saturating_mul(ENTRY_COST)),
        )
        .map_err(Refused::answer)?;
    let parsed = if body.len() > BLOCKING_ABOVE {
        tokio::task::spawn_blocking(move || wire::parse_request(&body))
            .await
            .map_err(|_| Answer::error(500, "the request was not processed"))?
    } else {
        wire::parse_request(&body)
    };
    let req = parsed.map_err(|e| Answer::error(400, e.message()))?;
    seen.client = Some(req.client_id.clone());
    if req.entries.len() > shared.max_entries {
        return Err(Answer::error(
            413,
            format!(
                "the request holds {} entries, over the limit of {} per request \
                 (--max-entries); send smaller batches",
                req.entries.len(),
                shared.max_entries
            ),
        ));
    }
    // The body is gone; hold what the parsed request takes.
    seen.reservation(shared)
        .set(parsed_cost(&req))
        .map_err(Refused::answer)?;
    authorize(shared, grant, &req.client_id)?;
    match submit(shared, Work::Push(req), weight).await? {
        Done::Push(outcome) => {
            let mut a = Answer::json(outcome.status(), outcome.body());
            match &outcome {
                PushOutcome::Accepted(_) => {}
                PushOutcome::Conflict { error, .. } => a.note = Some(error.clone()),
                PushOutcome::Full { .. } => {
                    a.note = Some("the receiving spool is full".into());
                    a.retry_after = true;
                }
            }
            Ok(a)
        }
        _ => Err(Answer::error(500, "internal error: wrong answer")),
    }
}

pub(super) async fn items(
    shared: &Shared,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers(), seen)?;
    // The key's scope: the token's name (none without a token file).
    let sender = match (&shared.tokens, grant) {
        (Some(tokens), Some(g)) => Some(tokens.name(g).to_string()),
        _ => None,
    };
    let key = idempotency_key(req.headers().get("idempotency-key"), shared.max_key_len)?;
    let group = header_text(
        req.headers().get("spool-group"),
        "Spool-Group",
        shared.max_key_len,
    )?;
    let coalesce_key = header_text(
        req.headers().get("spool-coalesce-key"),
        "Spool-Coalesce-Key",
        shared.max_key_len,
    )?;
    // The payload is bounded by --max-payload and, like every body, by
    // --max-body: the smaller one names the 413.
    let limit = if shared.max_payload <= shared.max_body {
        Limit {
            bytes: shared.max_payload,
            what: "payload",
            flag: "--max-payload",
        }
    } else {
        Limit {
            bytes: shared.max_body,
            what: "request body",
            flag: "--max-body",
        }
    };
    let payload = read_body(shared, req, &limit, seen).await?;
    seen.reservation(shared)
        .take(ENTRY_COST)
        .map_err(Refused::answer)?;
    let weight = payload.len();
    let work = Work::Item {
        item: NewItem {
            payload,
            key,
            group: Some(group).filter(|g| !g.is_empty()),
            coalesce_key: Some(coalesce_key).filter(|c| !c.is_empty()),
        },
        sender,
    };
    match submit(shared, work, weight).await? {
        Done::Item(ItemOutcome::Enqueued(e)) => Ok(Answer::json(
            if e.deduplicated { 200 } else { 201 },
            format!("{{\"id\":{},\"deduplicated\":{}}}", e.id, e.deduplicated).into_bytes(),
        )),
        Done::Item(ItemOutcome::Full) => {
            Ok(Answer::error(503, "the receiving spool is full; retry later").retry())
        }
        Done::Item(ItemOutcome::Refused(why)) => Err(Answer::error(400, why)),
        _ => Err(Answer::error(500, "internal error: wrong answer")),
    }
}

/// The key of a `POST /v1/items`, from its `Idempotency-Key` header:
/// none is `""`; a value that is not UTF-8 or is longer than `max` bytes
/// is 400.
pub(crate) fn idempotency_key(value: Option<&HeaderValue>, max: usize) -> Result<String, Answer> {
    header_text(value, "Idempotency-Key", max)
}

/// The text of header `name` (`Idempotency-Key`, `Spool-Group`,
/// `Spool-Coalesce-Key`): none is `""`; a value that is not UTF-8 or is
/// longer than `max` bytes is 400.
fn header_text(value: Option<&HeaderValue>, name: &str, max: usize) -> Result<String, Answer> {
    let Some(v) = value else {
        return Ok(String::new());
    };
    let text = std::str::from_utf8(v.as_bytes())
        .map_err(|_| Answer::error(400, format!("the {name} header is not UTF-8")))?;
    if text.len() > max {
        return Err(Answer::error(
            400,
            format!(
                "the {name} header is {} bytes, over the limit of {max}",
                text.len()
            ),
        ));
    }
    Ok(text.to_string())
}

pub(super) async fn clients(
    shared: &Shared,
    req: Request<Incoming>,
    path: &str,
    seen: &mut Seen,
) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers(), seen)?;
    let id = client_of_path(path)?;
    seen.client = Some(id.clone());
    authorize(shared, grant, &id)?;
    match submit(shared, Work::Client(id), 0).await? {
        Done::Client(state) => Ok(Answer::json(200, state.to_json())),
        _ => Err(Answer::error(500, "internal error: wrong answer")),
    }
}

/// The client id of a `GET /v1/clients/{client_id}` path, percent-decoded
/// and checked (400 otherwise).
pub(crate) fn client_of_path(path: &str) -> Result<String, Answer> {
    let raw = path.strip_prefix("/v1/clients/").unwrap_or_default();
    let id = percent_decode(raw)
        .ok_or_else(|| Answer::error(400, "the client id in the path is not valid"))?;
    wire::validate_client_id(&id).map_err(|e| Answer::error(400, e.message()))?;
    Ok(id)
}

pub(super) async fn health(shared: &Shared) -> Result<Answer, Answer> {
    let state = shared.state.get(shared).await?;
    Ok(Answer::json(
        200,
        format!("{{\"status\":\"ok\",\"depth\":{}}}", state.depth).into_bytes(),
    ))
}

pub(super) async fn metrics(
    shared: &Shared,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Answer, Answer> {
    authenticate(shared, req.headers(), seen)?;
    let state = shared.state.get(shared).await?;
    let mut text = state.gauges.clone();
    text.push_str(&shared.metrics.render(&shared.spool, state.clients));
    let mut a = Answer::json(200, text.into_bytes());
    a.content_type = "text/plain; version=0.0.4; charset=utf-8";
    Ok(a)
}

/// Decode `%XX` escapes; `None` for a malformed escape or bytes that are
/// not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%3Ab").as_deref(), Some("a:b"));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("%"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("%+1"), None);
    }
}
