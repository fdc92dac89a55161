//! JSON header serialization (type 0), `remoting.md` §4.
//! OWNER: remoting-core helper — replace the todo!() bodies.

use bytes::BytesMut;

use crate::command::{HeaderDecodeError, RemotingCommand};

/// Parses a JSON header into a command with an empty body.
pub fn read(header: &[u8]) -> Result<RemotingCommand, HeaderDecodeError> {
    let _ = header;
    todo!("json header read")
}

/// Appends `cmd`'s header as compact JSON.
pub fn write(cmd: &RemotingCommand, out: &mut BytesMut) {
    let _ = (cmd, out);
    todo!("json header write")
}
