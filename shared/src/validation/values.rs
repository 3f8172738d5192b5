//! How many JSON values a spec holds, counted without building any.
//!
//! Parsed, each JSON value costs hundreds of bytes however short its text (`0,` is two bytes): a
//! webhook review of a spec at the limit peaks about 46 MiB over idle (webhook/README.md). So a
//! spec's byte size does not bound its memory; its count of values does. The webhook
//! counts the raw text of a spec before parsing it ([`count_json_values`]); the controller, which
//! may read an object that never went through the webhook, counts its typed spec
//! ([`count_serialized_values`]) before building anything from it. Both refuse past
//! [`MAX_SPEC_VALUES`] with [`too_many_values`].

use serde::Serialize;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser;

use super::{FieldPath, Report};

/// A spec holding more JSON values than this (numbers, strings, booleans, nulls, lists, objects and
/// object keys, nested ones included) is refused. A 512 KiB `variables` document of realistic
/// values holds a few tens of thousands.
pub const MAX_SPEC_VALUES: usize = 100_000;

/// The violation of a spec past [`MAX_SPEC_VALUES`], at `path` (the spec).
pub fn too_many_values(report: &mut Report, path: &FieldPath) {
    report.violation(
        path,
        format!(
            "must hold at most {MAX_SPEC_VALUES} JSON values (numbers, strings, lists, objects and \
             object keys, nested ones included); the value is the limit it passed"
        ),
        &MAX_SPEC_VALUES,
    );
}

/// How many JSON values `text` holds, or `None` past `max`, counted without building any. Text
/// that is not JSON counts the values before the error (whoever parses it reports the error).
pub fn count_json_values(text: &str, max: usize) -> Option<usize> {
    let mut n = 0;
    let mut de = serde_json::Deserializer::from_str(text);
    match (Count { n: &mut n, max }).deserialize(&mut de) {
        Ok(()) => Some(n),
        Err(_) if n > max => None,
        Err(_) => Some(n),
    }
}

/// How many JSON values `value` serializes to, or `None` past `max`, counted as they would be
/// written, without writing them. The same count as [`count_json_values`] of its JSON text.
pub fn count_serialized_values<T: Serialize + ?Sized>(value: &T, max: usize) -> Option<usize> {
    let mut counter = Counter { n: 0, max };
    match value.serialize(&mut counter) {
        Ok(()) => Some(counter.n),
        Err(_) if counter.n > max => None,
        // An unserializable value (a map with non-string keys, say) counts what came before.
        Err(_) => Some(counter.n),
    }
}

struct Count<'c> {
    n: &'c mut usize,
    max: usize,
}

impl Count<'_> {
    fn one<E: serde::de::Error>(&mut self) -> Result<(), E> {
        *self.n += 1;
        if *self.n > self.max {
            Err(E::custom("too many values"))
        } else {
            Ok(())
        }
    }
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(mut self, _: bool) -> Result<(), E> {
        self.one()
    }
    fn visit_i64<E: serde::de::Error>(mut self, _: i64) -> Result<(), E> {
        self.one()
    }
    fn visit_u64<E: serde::de::Error>(mut self, _: u64) -> Result<(), E> {
        self.one()
    }
    fn visit_f64<E: serde::de::Error>(mut self, _: f64) -> Result<(), E> {
        self.one()
    }
    fn visit_str<E: serde::de::Error>(mut self, _: &str) -> Result<(), E> {
        self.one()
    }
    fn visit_unit<E: serde::de::Error>(mut self) -> Result<(), E> {
        self.one()
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.one()?;
        while seq
            .next_element_seed(Count {
                n: &mut *self.n,
                max: self.max,
            })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.one()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            // A key costs what a string value costs.
            self.one()?;
            map.next_value_seed(Count {
                n: &mut *self.n,
                max: self.max,
            })?;
        }
        Ok(())
    }
}

/// The serializer that only counts, as JSON would write: a scalar, `null`, a list or an object is
/// one value, an object key another, a newtype is what it wraps, an enum variant with data is an
/// object of one key.
struct Counter {
    n: usize,
    max: usize,
}

#[derive(Debug)]
struct Past;

impl std::fmt::Display for Past {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("too many values, or not JSON")
    }
}

impl std::error::Error for Past {}

impl ser::Error for Past {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Past
    }
}

impl Counter {
    fn add(&mut self, k: usize) -> Result<(), Past> {
        self.n = self.n.saturating_add(k);
        if self.n > self.max { Err(Past) } else { Ok(()) }
    }
}

macro_rules! scalars {
    ($($f:ident: $t:ty),* $(,)?) => {
        $(fn $f(self, _: $t) -> Result<(), Past> {
            self.add(1)
        })*
    };
}

impl ser::Serializer for &mut Counter {
    type Ok = ();
    type Error = Past;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    scalars!(
        serialize_bool: bool,
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_i128: i128,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64,
        serialize_u128: u128,
        serialize_f32: f32,
        serialize_f64: f64,
        serialize_char: char,
        serialize_str: &str,
    );

    /// Bytes are written as a list of numbers.
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Past> {
        self.add(1 + v.len())
    }
    fn serialize_none(self) -> Result<(), Past> {
        self.add(1)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Past> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Past> {
        self.add(1)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Past> {
        self.add(1)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Past> {
        self.add(1)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Past> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), Past> {
        self.add(2)?;
        value.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Past> {
        self.add(1)?;
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Past> {
        self.add(1)?;
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Past> {
        self.add(1)?;
        Ok(self)
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self, Past> {
        self.add(3)?;
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, Past> {
        self.add(1)?;
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Past> {
        self.add(1)?;
        Ok(self)
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self, Past> {
        self.add(3)?;
        Ok(self)
    }
}

impl ser::SerializeSeq for &mut Counter {
    type Ok = ();
    type Error = Past;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Past> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Past> {
        Ok(())
    }
}

impl ser::SerializeTuple for &mut Counter {
    type Ok = ();
    type Error = Past;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Past> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Past> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for &mut Counter {
    type Ok = ();
    type Error = Past;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Past> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Past> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for &mut Counter {
    type Ok = ();
    type Error = Past;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Past> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Past> {
        Ok(())
    }
}

impl ser::SerializeMap for &mut Counter {
    type Ok = ();
    type Error = Past;
    /// A key is written as one string, whatever its type.
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), Past> {
        self.add(1)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Past> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Past> {
        Ok(())
    }
}

impl ser::SerializeStruct for &mut Counter {
    type Ok = ();
    type Error = Past;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, value: &T) -> Result<(), Past> {
        self.add(1)?;
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Past> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for &mut Counter {
    type Ok = ();
    type Error = Past;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, value: &T) -> Result<(), Past> {
        self.add(1)?;
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Past> {
        Ok(())
    }
}
