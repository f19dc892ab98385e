#pragma once
#define HELLO_BIAS 7u
