//! The front doors' names: a leaf every layer may name (the core routes a
//! call by it, metrics and usage label by it, the store keeps it).

/// The front door a call came through: its result is answered in that
/// door's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontDoor {
    /// A2T.
    A2t,
    /// Open Tool Calling.
    Otc,
    /// The Model Context Protocol.
    Mcp,
}

impl FrontDoor {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            FrontDoor::A2t => "a2t",
            FrontDoor::Otc => "otc",
            FrontDoor::Mcp => "mcp",
        }
    }

    /// From its stored form.
    pub fn parse(s: &str) -> Option<FrontDoor> {
        match s {
            "a2t" => Some(FrontDoor::A2t),
            "otc" => Some(FrontDoor::Otc),
            "mcp" => Some(FrontDoor::Mcp),
            _ => None,
        }
    }
}
