//! Lending a session's message pack texts to JS without copying them: a `Buffer` over the
//! bytes [`SharedBytes`] keeps mapped, which the engine checked (message-pack.md MSP-1,
//! MSP-2) and never changes (MSP-6). The only `unsafe` of the binding.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr;

use napi::bindgen_prelude::{Result, ToNapiValue, TypeName, ValueType};
use napi::{Error, Status, sys};
use surfacelog::SharedBytes;

/// Bytes lent to JS as a `Buffer` (an external one: its memory stays the engine's, released
/// when the `Buffer` is collected). `index.js` keeps it in a private field and only reads
/// it (`buf.toString`): the bytes may lie in a read-only map, so JS must never write them,
/// and no caller can reach it to. A runtime that refuses external buffers gets a copy.
pub struct Lent(pub SharedBytes);

impl TypeName for Lent {
    fn type_name() -> &'static str {
        "Buffer"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

/// Drops the [`SharedBytes`] a `Buffer` was made over, when V8 collects it.
extern "C" fn release(_env: sys::napi_env, _data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` is the `Box<SharedBytes>` leaked in `to_napi_value` for this one
    // buffer; N-API calls the finalizer once, so it is reclaimed exactly once.
    drop(unsafe { Box::from_raw(hint.cast::<SharedBytes>()) });
}

impl ToNapiValue for Lent {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let mut out = ptr::null_mut();
        let len = val.0.len();
        if len == 0 {
            // An external buffer needs a non-null pointer: an empty one is an ordinary one.
            // SAFETY: `env` is the valid env N-API gave the caller (the trait's contract).
            let status = unsafe { sys::napi_create_buffer(env, 0, ptr::null_mut(), &raw mut out) };
            return check(status, out);
        }
        let data = val.0.as_ptr().cast_mut().cast::<c_void>();
        let owner = Box::into_raw(Box::new(val.0));
        // SAFETY: `data..data + len` are the bytes `owner` keeps valid and unchanged until
        // `release` drops it, which N-API calls when the buffer is collected, not before.
        // JS only reads them (see [`Lent`]).
        let status = unsafe {
            sys::napi_create_external_buffer(
                env,
                len,
                data,
                Some(release),
                owner.cast(),
                &raw mut out,
            )
        };
        if status == sys::Status::napi_no_external_buffers_allowed {
            // SAFETY: `owner` was not taken by N-API (it refused), so it is still ours.
            let owner = unsafe { Box::from_raw(owner) };
            // SAFETY: `owner`'s bytes are valid for `len` bytes while it lives (this call).
            let status = unsafe {
                sys::napi_create_buffer_copy(
                    env,
                    len,
                    owner.as_ptr().cast(),
                    ptr::null_mut(),
                    &raw mut out,
                )
            };
            return check(status, out);
        }
        if status != sys::Status::napi_ok {
            // SAFETY: on failure N-API did not keep `owner` (no buffer, no finalizer).
            drop(unsafe { Box::from_raw(owner) });
        }
        check(status, out)
    }
}

/// `out` when `status` is `napi_ok`.
fn check(status: sys::napi_status, out: sys::napi_value) -> Result<sys::napi_value> {
    if status == sys::Status::napi_ok {
        Ok(out)
    } else {
        Err(Error::new(
            Status::from(status),
            "surfacelog: cannot make a Buffer of the message texts".to_owned(),
        ))
    }
}
