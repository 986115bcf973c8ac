//! The CEL a claim's device selectors may use for gpu-admission to tell which GPU classes they can match: a
//! small, documented grammar, everything else undecidable (and so denied in `Enforce`):
//!
//! ```text
//! expr    := and ("||" and)*
//! and     := operand ("&&" operand)*
//! operand := "(" expr ")" | atom
//! atom    := device.driver == 'D'
//!          | device.attributes['D'].A == 'P'               A: a catalog class's product attribute (productName)
//!          | device.attributes['D'].A in ['P', 'Q', ...]
//!          | device.attributes['D'].type == 'T'              the driver's device type (gpu, mig, vfio, channel…)
//!          | device.attributes['D'].A == N | true | false     an integer or boolean attribute (an index, an id)
//!          | device.capacity['D'].memory.compareTo(quantity('Q')) OP 0      OP: >= > <= < ==
//!          | device.capacity['D'].memory.isGreaterThan(quantity('Q'))
//!          | device.capacity['D'].memory.isLessThan(quantity('Q'))
//! ```
//!
//! Strings are single- or double-quoted without escapes. The parse gives a [`Selector`] tree; what it can
//! match is computed by the caller against the catalog (`super::matches`).

/// A memory comparison's direction, after normalising to `memory OP quantity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    AtLeast,
    Above,
    AtMost,
    Below,
    Equal,
}

/// A parsed selector.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    Driver(String),
    /// (driver, attribute, product names).
    Product(String, String, Vec<String>),
    /// (driver, direction, GiB).
    Memory(String, Compare, f64),
    /// (driver, attribute): a device-type attribute (`type`, as NVIDIA's driver publishes `gpu`, `mig`,
    /// `vfio`, `channel`, `daemon`) or an integer or boolean one (an index, a channel id). It narrows which of
    /// the driver's devices, never which product: read as any device of the driver.
    Attribute(String, String),
    And(Box<Selector>, Box<Selector>),
    Or(Box<Selector>, Box<Selector>),
}

/// The attribute by which DRA drivers publish a device's type (NVIDIA's `gpu`, `mig`, `vfio`; its
/// ComputeDomain driver's `channel`, `daemon`): never a product.
const DEVICE_TYPE: &str = "type";

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Int(i64),
    Punct(&'static str),
}

const PUNCTS: [&str; 14] = [
    "&&", "||", "==", ">=", "<=", "(", ")", "[", "]", ",", ".", ">", "<", "!",
];

fn tokens(text: &str) -> Result<Vec<Tok>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'\'' || c == b'"' {
            let end = text[i + 1..]
                .find(c as char)
                .ok_or("an unterminated string")?;
            let s = &text[i + 1..i + 1 + end];
            if s.contains('\\') {
                return Err("a string with an escape".into());
            }
            out.push(Tok::Str(s.to_string()));
            i += end + 2;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let len = b[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            out.push(Tok::Ident(text[i..i + len].to_string()));
            i += len;
        } else if c.is_ascii_digit() {
            let len = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            let n = text[i..i + len]
                .parse()
                .map_err(|_| "a number out of range")?;
            out.push(Tok::Int(n));
            i += len;
        } else if let Some(p) = PUNCTS.iter().find(|p| text[i..].starts_with(**p)) {
            out.push(Tok::Punct(p));
            i += p.len();
        } else {
            return Err(format!("`{}`", &text[i..].chars().next().unwrap_or(' ')));
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Punct(q)) if *q == p) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), String> {
        self.eat(p)
            .then_some(())
            .ok_or_else(|| format!("`{p}` expected"))
    }

    fn ident(&mut self, name: &str) -> Result<(), String> {
        match self.next() {
            Some(Tok::Ident(i)) if i == name => Ok(()),
            _ => Err(format!("`{name}` expected")),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Tok::Str(s)) => Ok(s),
            _ => Err("a string expected".into()),
        }
    }

    fn expr(&mut self) -> Result<Selector, String> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Selector::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Selector, String> {
        let mut left = self.operand()?;
        while self.eat("&&") {
            left = Selector::And(Box::new(left), Box::new(self.operand()?));
        }
        Ok(left)
    }

    fn operand(&mut self) -> Result<Selector, String> {
        if self.eat("(") {
            let e = self.expr()?;
            self.expect(")")?;
            return Ok(e);
        }
        self.atom()
    }

    /// `device.X` then what follows X.
    fn atom(&mut self) -> Result<Selector, String> {
        self.ident("device")?;
        self.expect(".")?;
        match self.next() {
            Some(Tok::Ident(f)) if f == "driver" => {
                self.expect("==")?;
                Ok(Selector::Driver(self.string()?))
            }
            Some(Tok::Ident(f)) if f == "attributes" => self.product(),
            Some(Tok::Ident(f)) if f == "capacity" => self.memory(),
            _ => Err("device.driver, device.attributes or device.capacity expected".into()),
        }
    }

    /// `['D'].A == 'P'` or `['D'].A in ['P', ...]`.
    fn product(&mut self) -> Result<Selector, String> {
        self.expect("[")?;
        let driver = self.string()?;
        self.expect("]")?;
        self.expect(".")?;
        let Some(Tok::Ident(attribute)) = self.next() else {
            return Err("an attribute name expected".into());
        };
        if self.eat("==") {
            return match self.next() {
                Some(Tok::Str(_)) if attribute == DEVICE_TYPE => {
                    Ok(Selector::Attribute(driver, attribute))
                }
                Some(Tok::Str(s)) => Ok(Selector::Product(driver, attribute, vec![s])),
                Some(Tok::Int(_)) => Ok(Selector::Attribute(driver, attribute)),
                Some(Tok::Ident(b)) if b == "true" || b == "false" => {
                    Ok(Selector::Attribute(driver, attribute))
                }
                _ => Err("a string, an integer or a boolean expected".into()),
            };
        }
        self.ident("in")
            .map_err(|_| format!("{attribute} is compared with == or in [...] only"))?;
        self.expect("[")?;
        let mut names = vec![self.string()?];
        while self.eat(",") {
            names.push(self.string()?);
        }
        self.expect("]")?;
        if attribute == DEVICE_TYPE {
            return Ok(Selector::Attribute(driver, attribute));
        }
        Ok(Selector::Product(driver, attribute, names))
    }

    /// `['D'].memory.compareTo(quantity('Q')) OP 0`, `.isGreaterThan(quantity('Q'))`, `.isLessThan(…)`.
    fn memory(&mut self) -> Result<Selector, String> {
        self.expect("[")?;
        let driver = self.string()?;
        self.expect("]")?;
        self.expect(".")?;
        self.ident("memory")?;
        self.expect(".")?;
        let Some(Tok::Ident(method)) = self.next() else {
            return Err("compareTo, isGreaterThan or isLessThan expected".into());
        };
        self.expect("(")?;
        self.ident("quantity")?;
        self.expect("(")?;
        let q = self.string()?;
        self.expect(")")?;
        self.expect(")")?;
        let gib = quantity_gib(&q).ok_or_else(|| format!("`{q}` is not a quantity"))?;
        let cmp = match method.as_str() {
            "isGreaterThan" => Compare::Above,
            "isLessThan" => Compare::Below,
            "compareTo" => {
                let op = match self.next() {
                    Some(Tok::Punct(p)) => p,
                    _ => return Err("a comparison expected".into()),
                };
                if self.next() != Some(Tok::Int(0)) {
                    return Err("compareTo(...) is compared with 0 only".into());
                }
                match op {
                    ">=" => Compare::AtLeast,
                    ">" => Compare::Above,
                    "<=" => Compare::AtMost,
                    "<" => Compare::Below,
                    "==" => Compare::Equal,
                    _ => return Err(format!("`{op}` is not a comparison")),
                }
            }
            other => return Err(format!("`{other}` is not a quantity comparison")),
        };
        Ok(Selector::Memory(driver, cmp, gib))
    }
}

/// A Kubernetes quantity in GiB (`40Gi`, `80G`, `81559Mi`, plain bytes).
fn quantity_gib(q: &str) -> Option<f64> {
    let parsed: kube_quantity::ParsedQuantity =
        (&k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.to_string()))
            .try_into()
            .ok()?;
    parsed
        .to_bytes_f64()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|b| b / (1u64 << 30) as f64)
}

/// Parses one selector expression of the grammar; `Err` says why it is outside it.
pub fn parse(text: &str) -> Result<Selector, String> {
    let mut p = Parser {
        toks: tokens(text)?,
        at: 0,
    };
    let e = p.expr()?;
    match p.peek() {
        None => Ok(e),
        Some(t) => Err(format!("unexpected {t:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar() {
        assert_eq!(
            parse("device.driver == 'gpu.nvidia.com'"),
            Ok(Selector::Driver("gpu.nvidia.com".into()))
        );
        assert_eq!(
            parse(
                "device.attributes[\"gpu.nvidia.com\"].productName in ['NVIDIA L4', 'NVIDIA L40S']"
            ),
            Ok(Selector::Product(
                "gpu.nvidia.com".into(),
                "productName".into(),
                vec!["NVIDIA L4".into(), "NVIDIA L40S".into()]
            ))
        );
        assert_eq!(
            parse("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"),
            Ok(Selector::Memory(
                "gpu.nvidia.com".into(),
                Compare::AtLeast,
                40.0
            ))
        );
        let e = parse(
            "(device.driver == 'a' || device.driver == 'b') && device.capacity['a'].memory.isLessThan(quantity('512Mi'))",
        )
        .unwrap();
        assert!(matches!(e, Selector::And(_, _)), "{e:?}");
        // NVIDIA's dra-driver-gpu chart's DeviceClasses (as the GPU Operator renders them).
        let nvidia = |driver: &str, rest: &str| format!("device.driver == '{driver}' && {rest}");
        let ty = |d: &str| Selector::Attribute(d.into(), "type".into());
        let driver = |d: &str| Box::new(Selector::Driver(d.into()));
        for (text, parsed) in [
            (
                nvidia(
                    "gpu.nvidia.com",
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'",
                ),
                Selector::And(driver("gpu.nvidia.com"), Box::new(ty("gpu.nvidia.com"))),
            ),
            (
                nvidia(
                    "gpu.nvidia.com",
                    "device.attributes['gpu.nvidia.com'].type == 'mig'",
                ),
                Selector::And(driver("gpu.nvidia.com"), Box::new(ty("gpu.nvidia.com"))),
            ),
            (
                nvidia(
                    "gpu.nvidia.com",
                    "device.attributes['gpu.nvidia.com'].type == 'vfio'",
                ),
                Selector::And(driver("gpu.nvidia.com"), Box::new(ty("gpu.nvidia.com"))),
            ),
            (
                nvidia(
                    "compute-domain.nvidia.com",
                    "device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
                ),
                Selector::And(
                    driver("compute-domain.nvidia.com"),
                    Box::new(ty("compute-domain.nvidia.com")),
                ),
            ),
            (
                nvidia(
                    "compute-domain.nvidia.com",
                    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && \
                     device.attributes['compute-domain.nvidia.com'].id == 0",
                ),
                Selector::And(
                    Box::new(Selector::And(
                        driver("compute-domain.nvidia.com"),
                        Box::new(ty("compute-domain.nvidia.com")),
                    )),
                    Box::new(Selector::Attribute(
                        "compute-domain.nvidia.com".into(),
                        "id".into(),
                    )),
                ),
            ),
        ] {
            assert_eq!(parse(&text), Ok(parsed), "{text}");
        }
        // A string attribute other than the device type is a product attribute, judged against the catalog.
        assert!(matches!(
            parse("device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"),
            Ok(Selector::Product(..))
        ));
        for undecidable in [
            "true",
            "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H')",
            "device.attributes['gpu.nvidia.com'].productName != 'NVIDIA L4'",
            "!(device.driver == 'x')",
            "device.driver == 'x' ||",
            "device.attributes['gpu.nvidia.com'].productName == 'a\\'b'",
            "device.capacity['d'].memory.compareTo(quantity('1Gi')) >= 1",
            "device.driver == 'x' ? true : false",
            "",
        ] {
            assert!(parse(undecidable).is_err(), "{undecidable}");
        }
    }
}
