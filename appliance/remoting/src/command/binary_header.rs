//! ROCKETMQ binary header serialization (type 1), `remoting.md` §5.
//! OWNER: remoting-core helper — replace the todo!() bodies.

use bytes::BytesMut;

use crate::command::{HeaderDecodeError, RemotingCommand};

/// Parses a binary header into a command with an empty body.
pub fn read(header: &[u8]) -> Result<RemotingCommand, HeaderDecodeError> {
    let _ = header;
    todo!("binary header read")
}

/// Appends `cmd`'s header in the ROCKETMQ binary layout.
pub fn write(cmd: &RemotingCommand, out: &mut BytesMut) {
    let _ = (cmd, out);
    todo!("binary header write")
}
