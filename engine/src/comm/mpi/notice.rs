//! [`Notice`]: what a process tells the others when its step fails, the facts and the remedy
//! apart, so that each rank words the remedy in its own front end's style.

use pipetrain_schedules::Remedy;

/// A failure notice, as it travels (JSON bytes).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Notice {
    /// What the failing process was doing and why it failed.
    pub message: String,
    /// What would fix it.
    pub remedy: Option<Remedy>,
}

impl Notice {
    /// The bytes to send.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a notice of text and plain values serializes")
    }

    /// The notice `bytes` hold; bytes that are not one (another build) are its message.
    pub fn decode(bytes: &[u8]) -> Self {
        serde_json::from_slice(bytes).unwrap_or_else(|_| Notice {
            message: String::from_utf8_lossy(bytes).into_owned(),
            remedy: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use pipetrain_schedules::remedy::{Setting, Value};

    use super::*;

    #[test]
    fn a_notice_keeps_its_remedy_and_plain_text_is_a_message() {
        let sent = Notice {
            message: "stage 1 sent nothing".into(),
            remedy: Some(Remedy::set(Setting::CommTimeout, Value::Larger)),
        };
        let got = Notice::decode(&sent.encode());
        assert_eq!((got.message, got.remedy), (sent.message, sent.remedy));
        let plain = Notice::decode(b"rank 2 failed");
        assert_eq!(
            (plain.message.as_str(), plain.remedy),
            ("rank 2 failed", None)
        );
    }
}
