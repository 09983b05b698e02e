package models

// GLM-4 (model_type "glm4": THUDM/GLM-4-9B-0414, GLM-Z1). Read against transformers 5.17
// models/glm4/{configuration,modeling}_glm4.py: GLM's modules (glm.go) in a block that also
// normalizes each branch's output before its residual add, Llama's norm each time:
//
//	layers.i.input_layernorm            rmsnorm     Glm4RMSNorm
//	layers.i.self_attn                  attention   Glm4Attention
//	layers.i.post_self_attn_layernorm   rmsnorm     Glm4RMSNorm   (then the residual add)
//	layers.i.post_attention_layernorm   rmsnorm     Glm4RMSNorm
//	layers.i.mlp                        mlp-swiglu  Glm4MLP
//	layers.i.post_mlp_layernorm         rmsnorm     Glm4RMSNorm   (then the residual add)
//
// Glm4Config's defaults are GlmConfig's.
var glm4 = glmFamily{modelType: "glm4", class: "Glm4", sandwich: true}

func init() { registerGLMFamily(glm4) }
