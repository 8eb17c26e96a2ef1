//! kwok's Stage files imported into lifecycle policies (`kwok-pools stage import`), never
//! interpreted at run time: the Stage types ([`api`]), kwok's selector expressions
//! ([`expression`]), its status templates rendered as kwok renders them ([`template`]), and the
//! mapping with its field-by-field report ([`map`]).

pub mod api;
pub mod expression;
pub mod map;
pub mod template;
