//! The gRPC codec of the `Scorer` service: `tonic-prost`'s, except that a message is decoded from one
//! contiguous slice.
//!
//! tonic hands a decoder the message as a `DecodeBuf` over its receive `BytesMut`. prost reads through the
//! `Buf` trait, and every field's tag, length and value then advances the `BytesMut` itself (~35
//! instructions each): a third of decoding a `ScoreResponse`. A message is always one slice of that buffer
//! (tonic waits for all of it, and decompresses into one buffer too), so it is decoded from `&[u8]`, whose
//! advance is a pointer bump, and the `DecodeBuf` is advanced once. Were it ever split, it is decoded
//! through the `Buf` as `tonic-prost` does. Encoding is `tonic-prost`'s own.

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// `tonic_prost::ProstCodec` with [`SliceDecoder`]; named by the generated client and server.
#[derive(Debug, Clone)]
pub(crate) struct SliceCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}

/// Decodes `U` from the message's bytes as one slice (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct SliceDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let len = buf.remaining();
        let decoded = if buf.chunk().len() == len {
            let item = U::decode(buf.chunk());
            buf.advance(len);
            item
        } else {
            U::decode(buf)
        };
        // As tonic-prost: a message that does not parse is an INTERNAL status.
        decoded
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorer::v1::{GpuClass, ScoreResponse};
    use http_body_util::StreamBody;
    use prost::bytes::{BufMut, Bytes};
    use tonic::codec::Streaming;

    fn answer(id: &str) -> ScoreResponse {
        ScoreResponse {
            request_id: id.into(),
            accepted_classes: vec![GpuClass {
                name: "H100-80GB".into(),
                memory_gib: 80.0,
                ..Default::default()
            }],
            avoid_job_types: vec!["train-llama".into()],
            ..Default::default()
        }
    }

    /// gRPC's framing of `messages`: a compression flag and a length before each.
    fn framed(messages: &[ScoreResponse]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            out.put_u8(0);
            out.put_u32(m.encoded_len() as u32);
            m.encode(&mut out).unwrap();
        }
        out
    }

    /// What a stream of `wire`, received in chunks of `chunk` bytes, decodes to.
    async fn received(wire: Vec<u8>, chunk: usize) -> Vec<Result<ScoreResponse, tonic::Code>> {
        let frames: Vec<Result<_, tonic::Status>> = wire
            .chunks(chunk)
            .map(|c| Ok(http_body::Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let body = StreamBody::new(futures::stream::iter(frames));
        let decoder = SliceCodec::<ScoreResponse, ScoreResponse>::default().decoder();
        let mut stream = Streaming::new_request(decoder, body, None, None);
        let mut out = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(m)) => out.push(Ok(m)),
                Ok(None) => return out,
                Err(status) => {
                    out.push(Err(status.code()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn decodes_each_message_of_a_stream_whatever_its_chunks() {
        let sent = [
            answer("a"),
            answer("b"),
            ScoreResponse::default(),
            answer("c"),
        ];
        let wire = framed(&sent);
        for chunk in [1, 3, 7, 64, wire.len()] {
            let got = received(wire.clone(), chunk).await;
            let want: Vec<_> = sent.iter().cloned().map(Ok).collect();
            assert_eq!(got, want, "received in chunks of {chunk} bytes");
        }
    }

    #[tokio::test]
    async fn a_message_that_does_not_parse_is_internal_as_with_tonic_prost() {
        // A length-delimited field 1 announcing 5 bytes with only 2 left in the message.
        let mut wire = framed(&[answer("a")]);
        wire.extend_from_slice(&[0, 0, 0, 0, 4, 0x0a, 0x05, b'a', b'b']);
        let got = received(wire, 5).await;
        assert_eq!(got, vec![Ok(answer("a")), Err(tonic::Code::Internal)]);
    }
}
