//! `baaaht-speech`: hears voice notes and speaks answers for the daemon, in a container of its
//! own without network (issue 63). `audio` decodes what a channel brings, `hear` is whisper.cpp,
//! `speak` is espeak-ng with opusenc, `server` the Speech service on the container's socket;
//! `convert` and `install` make the recogniser's model from PyPI's packages.

pub mod audio;
pub mod convert;
pub mod hear;
pub mod install;
pub mod server;
pub mod speak;
