//! `book_flight`: a consequential tool (it books seats), kept self-contained so
//! that it runs anywhere: the confirmation code is derived from the booking and
//! the price from a fare table.

// wit-bindgen's generated export takes the input record's fields as flat
// arguments: one per field, more than clippy's default of seven.
#![allow(clippy::too_many_arguments)]

plinth_sdk::tool!("book-flight");

struct BookFlight;

impl Guest for BookFlight {
    fn call(input: Input) -> Result<Output, ToolError> {
        let total = total_price(&input)?;
        Ok(Output {
            confirmation_code: confirmation_code(&input),
            total_price_usd: total,
            cabin_class: input.cabin_class,
        })
    }

    /// The booking in words and the fare it will charge, so the traveller
    /// confirms the price, not only the flight. A booking that cannot be
    /// made is refused here, before anyone is asked to confirm it.
    fn describe(input: Input) -> Result<CallDescription, ToolError> {
        let total = total_price(&input)?;
        let passengers = match input.passengers {
            1 => "1 passenger".to_string(),
            n => format!("{n} passengers"),
        };
        Ok(CallDescription::new(format!(
            "Books {passengers} in {} on flight {} on {}.",
            cabin_name(input.cabin_class),
            input.flight_number,
            input.date
        ))
        .fact("Fare per passenger", format!("{} USD", fare(input.cabin_class)))
        .fact("Total price", format!("{total} USD, taxes included")))
    }
}

/// The fare per passenger, from the fare table.
fn fare(cabin: CabinClass) -> u32 {
    match cabin {
        CabinClass::Economy => 180,
        CabinClass::PremiumEconomy => 420,
        CabinClass::Business => 1_350,
        CabinClass::First => 4_200,
    }
}

fn cabin_name(cabin: CabinClass) -> &'static str {
    match cabin {
        CabinClass::Economy => "economy class",
        CabinClass::PremiumEconomy => "premium economy",
        CabinClass::Business => "business class",
        CabinClass::First => "first class",
    }
}

/// The booking's total price, once its flight number and date are checked
/// and it matches the price the traveller was quoted, if any.
fn total_price(input: &Input) -> Result<u32, ToolError> {
    check_flight_number(&input.flight_number)?;
    check_date(&input.date)?;
    let total = fare(input.cabin_class) * u32::from(input.passengers);
    if let Some(quoted) = input.quoted_price_usd
        && quoted != total
    {
        return Err(ToolError::new(format!("the price is {total} USD, not the {quoted} USD quoted"))
            .with_prompt_content(
                "The price changed. Tell the traveller the new price and book again only if they agree to it.",
            ));
    }
    Ok(total)
}

fn check_flight_number(number: &str) -> Result<(), ToolError> {
    let (airline, digits) = number.split_at(number.len().min(2));
    let valid = airline.len() == 2
        && airline.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && (1..=4).contains(&digits.len())
        && digits.chars().all(|c| c.is_ascii_digit());
    if valid {
        Ok(())
    } else {
        Err(ToolError::new(format!("`{number}` is not a flight number"))
            .with_prompt_content("A flight number is two letters then digits, like UA123. Ask the traveller for it."))
    }
}

fn check_date(date: &str) -> Result<(), ToolError> {
    let parts: Vec<&str> = date.split('-').collect();
    let number = |s: &str, len: usize| {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u32>().ok()).flatten()
    };
    let valid = match parts.as_slice() {
        [y, m, d] => matches!((number(y, 4), number(m, 2), number(d, 2)), (Some(_), Some(1..=12), Some(1..=31))),
        _ => false,
    };
    if valid { Ok(()) } else { Err(ToolError::new(format!("`{date}` is not a date in the form YYYY-MM-DD"))) }
}

/// Six characters from a stable hash (FNV-1a) of the booking, so that the same
/// booking always gets the same code.
fn confirmation_code(input: &Input) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let key = format!("{}|{}|{}|{:?}", input.flight_number, input.date, input.passengers, input.cabin_class);
    for byte in key.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    (0..6).map(|i| ALPHABET[((hash >> (i * 5)) & 31) as usize] as char).collect()
}

export!(BookFlight);
