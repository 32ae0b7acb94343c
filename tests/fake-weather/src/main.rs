//! `fake-weather [ADDR]`: serves the stand-in weather API (default
//! 127.0.0.1:8090) for the quickstart.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8090".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("fake weather service listening on http://{}", listener.local_addr()?);
    fake_weather::serve(listener, fake_weather::Counter::default()).await
}
