//! Macros shared by the options builders (Options, SeedOptions).

/// A builder method setting an optional C string field `$name`; a value with
/// a NUL byte is remembered in `refused` and reported when the options are
/// used.
macro_rules! string_setter {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub fn $name(mut self, value: &str) -> Self {
            match CString::new(value) {
                Ok(s) => self.$name = Some(s),
                Err(_) => {
                    self.refused =
                        Some(format!(concat!(stringify!($name), " {:?} contains a NUL byte"), value))
                }
            }
            self
        }
    };
}
