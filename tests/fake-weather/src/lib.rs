//! A stand-in for a weather service, shaped like common public weather APIs:
//!
//! - `GET /v1/geocode?name=CITY` → `{"results": [{"name", "country", "latitude", "longitude"}]}`
//!   (matching is case-insensitive on the part before the first comma;
//!   unknown cities give an empty list)
//! - `GET /v1/forecast?latitude=LAT&longitude=LON` →
//!   `{"current": {"temperature_c", "wind_speed_kmh", "conditions"}}`
//!
//! - `GET /v1/daily?latitude=LAT&longitude=LON&days=N` (N from 1 to 16) →
//!   `{"daily": [{"day", "high_c", "low_c", "conditions"}]}`, day 1 being today
//!
//! The city "Stormville" geocodes, but its forecasts answer `503`, so tests can
//! see how a tool reports a backend outage. Every request is counted, so tests
//! can check that a refused invocation never reached the backend, and the
//! `traceparent` headers it came with are kept (the first thousand), so
//! tests can check how a trace continues into the backend.

use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// `(name, country, latitude, longitude, temperature °C, wind km/h, conditions)`.
type City = (&'static str, &'static str, f64, f64, f64, f64, &'static str);

/// The cities the service knows.
const CITIES: &[City] = &[
    ("Boston", "United States", 42.36, -71.06, 3.4, 22.0, "light rain"),
    ("Los Angeles", "United States", 34.05, -118.24, 21.6, 9.0, "clear sky"),
    ("Omaha", "United States", 41.26, -95.94, 26.7, 14.2, "partly cloudy"),
    ("Paris", "France", 48.86, 2.35, 11.2, 12.5, "overcast"),
    ("Tokyo", "Japan", 35.68, 139.69, 17.9, 7.4, "clear sky"),
    ("Stormville", "United States", 41.55, -73.73, 0.0, 0.0, "unavailable"),
];

/// A request's `traceparent` and `tracestate` headers.
type TraceHeaders = (Option<String>, Option<String>);

/// Counts the requests served, and keeps their trace headers, for tests.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicUsize>, Arc<Mutex<Vec<TraceHeaders>>>);

/// `traceparent` headers kept at most.
const KEPT_TRACEPARENTS: usize = 1000;

impl Counter {
    /// Requests served so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// The `traceparent` header of each request received, in order (`None`
    /// for a request without one).
    pub fn traceparents(&self) -> Vec<Option<String>> {
        self.1.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(parent, _)| parent.clone()).collect()
    }

    /// The `tracestate` header of each request received, in order.
    pub fn tracestates(&self) -> Vec<Option<String>> {
        self.1.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(_, state)| state.clone()).collect()
    }
}

/// Keeps the request's `traceparent` and `tracestate` (see
/// [`Counter::traceparents`]).
async fn keep_traceparent(State(counter): State<Counter>, request: Request, next: Next) -> Response {
    {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let context = (header("traceparent"), header("tracestate"));
        let mut kept = counter.1.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < KEPT_TRACEPARENTS {
            kept.push(context);
        }
    }
    next.run(request).await
}

/// The service's routes.
pub fn router(counter: Counter) -> Router {
    Router::new()
        .route("/v1/geocode", get(geocode))
        .route("/v1/forecast", get(forecast))
        .route("/v1/daily", get(daily))
        .layer(axum::middleware::from_fn_with_state(counter.clone(), keep_traceparent))
        .with_state(counter)
}

#[derive(Deserialize)]
struct GeocodeQuery {
    name: String,
}

async fn geocode(State(counter): State<Counter>, Query(q): Query<GeocodeQuery>) -> Json<Value> {
    counter.0.fetch_add(1, Ordering::SeqCst);
    let wanted = q.name.split(',').next().unwrap_or("").trim().to_lowercase();
    let results: Vec<Value> = CITIES
        .iter()
        .filter(|c| c.0.to_lowercase() == wanted)
        .map(|c| json!({"name": c.0, "country": c.1, "latitude": c.2, "longitude": c.3}))
        .collect();
    Json(json!({ "results": results }))
}

/// The city at a position: `404` for none, `503` for Stormville, whose
/// weather station is always down (a backend outage the tools must report).
fn city_at(latitude: f64, longitude: f64) -> Result<&'static City, StatusCode> {
    let city = CITIES
        .iter()
        .find(|c| (c.2 - latitude).abs() < 0.01 && (c.3 - longitude).abs() < 0.01)
        .ok_or(StatusCode::NOT_FOUND)?;
    if city.0 == "Stormville" {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    Ok(city)
}

#[derive(Deserialize)]
struct ForecastQuery {
    latitude: f64,
    longitude: f64,
}

async fn forecast(State(counter): State<Counter>, Query(q): Query<ForecastQuery>) -> Result<Json<Value>, StatusCode> {
    counter.0.fetch_add(1, Ordering::SeqCst);
    let city = city_at(q.latitude, q.longitude)?;
    Ok(Json(json!({"current": {"temperature_c": city.4, "wind_speed_kmh": city.5, "conditions": city.6}})))
}

#[derive(Deserialize)]
struct DailyQuery {
    latitude: f64,
    longitude: f64,
    days: u8,
}

/// Days a daily forecast reaches.
const MAX_DAYS: u8 = 16;

/// A made-up but stable daily forecast: the current weather, drifting a
/// little from day to day.
async fn daily(State(counter): State<Counter>, Query(q): Query<DailyQuery>) -> Result<Json<Value>, StatusCode> {
    counter.0.fetch_add(1, Ordering::SeqCst);
    if !(1..=MAX_DAYS).contains(&q.days) {
        return Err(StatusCode::BAD_REQUEST);
    }
    let city = city_at(q.latitude, q.longitude)?;
    const LATER: [&str; 3] = ["partly cloudy", "light rain", "clear sky"];
    let days: Vec<Value> = (1..=q.days)
        .map(|day| {
            let drift = f64::from(day - 1) * 0.5;
            let conditions = if day == 1 { city.6 } else { LATER[usize::from(day) % LATER.len()] };
            json!({"day": day, "high_c": city.4 + 3.0 + drift, "low_c": city.4 - 4.0 - drift, "conditions": conditions})
        })
        .collect();
    Ok(Json(json!({ "daily": days })))
}

/// Serves on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, counter: Counter) -> std::io::Result<()> {
    axum::serve(listener, router(counter)).await
}
