mod cli;
mod grpc;
mod properties;
mod session;
