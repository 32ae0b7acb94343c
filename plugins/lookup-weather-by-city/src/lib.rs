//! `lookup_weather_by_city`: the drafts' running example, sculpted. One tool
//! call hides two backend calls: geocode the city, then fetch the current
//! weather at its coordinates.
//!
//! Backend API (see `tests/fake-weather` for the reference implementation):
//! - `GET {backend-url}/v1/geocode?name=CITY` →
//!   `{"results": [{"name", "country", "latitude", "longitude"}]}`
//! - `GET {backend-url}/v1/forecast?latitude=LAT&longitude=LON` →
//!   `{"current": {"temperature_c", "wind_speed_kmh", "conditions"}}`

use plinth_sdk::{config, http};
use serde::Deserialize;

plinth_sdk::tool!("lookup-weather-by-city");

#[derive(Deserialize)]
struct Geocoding {
    results: Vec<Place>,
}

#[derive(Deserialize)]
struct Place {
    name: String,
    country: String,
    latitude: f64,
    longitude: f64,
}

#[derive(Deserialize)]
struct Forecast {
    current: Current,
}

#[derive(Deserialize)]
struct Current {
    temperature_c: f64,
    wind_speed_kmh: f64,
    conditions: String,
}

struct Weather;

impl Guest for Weather {
    fn call(input: Input) -> Result<Output, ToolError> {
        let base = config::require("backend-url")?;
        let base = base.trim_end_matches('/');

        let places: Geocoding = fetch_json(&format!("{base}/v1/geocode?name={}", http::encode(&input.city)))?;
        let Some(place) = places.results.into_iter().next() else {
            return Err(ToolError::new(format!("no city called `{}` is known", input.city))
                .with_prompt_content("Ask the user to check the city's spelling or to name a nearby larger city."));
        };

        let forecast: Forecast =
            fetch_json(&format!("{base}/v1/forecast?latitude={}&longitude={}", place.latitude, place.longitude))?;
        let units = input.units.unwrap_or(TemperatureUnit::Celsius);
        let temperature = match units {
            TemperatureUnit::Celsius => forecast.current.temperature_c,
            TemperatureUnit::Fahrenheit => forecast.current.temperature_c * 9.0 / 5.0 + 32.0,
        };
        Ok(Output {
            location: format!("{}, {}", place.name, place.country),
            temperature: temperature.round().clamp(i16::MIN.into(), i16::MAX.into()) as i16,
            units,
            conditions: forecast.current.conditions,
            wind_speed_kmh: forecast.current.wind_speed_kmh.round().clamp(0.0, u16::MAX.into()) as u16,
            coordinates: Coordinates { latitude: place.latitude, longitude: place.longitude },
        })
    }
}

fn fetch_json<T: for<'de> Deserialize<'de>>(url: &str) -> Result<T, ToolError> {
    let response = http::get(url)?;
    if !response.is_success() {
        let error = ToolError::new("the weather service could not answer this request")
            .with_developer_message(format!("backend answered HTTP {}", response.status));
        // A 5xx from the backend is worth retrying; a 4xx is not.
        return Err(if response.status >= 500 {
            ToolError { can_retry: true, retry_after_ms: Some(2000), ..error }
        } else {
            error
        });
    }
    serde_json::from_slice(&response.body).map_err(|e| {
        ToolError::new("the weather service sent an answer this tool does not understand")
            .with_developer_message(e.to_string())
    })
}

export!(Weather);
