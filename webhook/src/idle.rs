//! A connection that is closed when nothing is read or written for a while.
//!
//! hyper's header-read timeout starts only once a request begins, and the HTTP/1-or-2 detection
//! waits for the first bytes without a limit, so a client that completes the TLS handshake and
//! then sends nothing (or parks an idle keep-alive connection forever) needs this.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Wraps an IO: a read that stays pending for `timeout` since the last progress fails with
/// `TimedOut`, which ends the connection.
#[derive(Debug)]
pub struct IdleTimeout<IO> {
    io: IO,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<IO> IdleTimeout<IO> {
    pub fn new(io: IO, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn progress(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.timeout);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for IdleTimeout<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.progress();
                Poll::Ready(r)
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connection idle for {:?}", this.timeout),
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(_))) {
            this.progress();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(_))) {
            this.progress();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_read_with_no_progress_for_the_timeout_fails_timed_out() {
        let (a, _b) = tokio::io::duplex(64);
        let mut idle = IdleTimeout::new(a, Duration::from_secs(60));
        let mut buf = [0u8; 8];
        let err = idle.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn traffic_keeps_the_connection_open() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut idle = IdleTimeout::new(a, Duration::from_secs(60));
        let mut buf = [0u8; 1];
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(50)).await;
            b.write_all(b"x").await.unwrap();
            idle.read_exact(&mut buf).await.unwrap();
        }
    }
}
